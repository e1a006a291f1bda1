"""Compression served: the build's .br and .gz copies, and how the local server picks one
(builder/output.py precompress, builder/serve.py)."""
from __future__ import annotations

import gzip
import http.client
import json

import brotli
import pytest

from builder import common, output, serve

JS = b"console.log('the guide');\n" * 2000


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "app.js").write_bytes(JS)
    (root / "app.js.gz").write_bytes(gzip.compress(JS, mtime=0))
    (root / "app.js.br").write_bytes(brotli.compress(JS))
    (root / "only-gz.wasm").write_bytes(b"\0asm" + JS)
    (root / "only-gz.wasm.gz").write_bytes(gzip.compress(b"\0asm" + JS, mtime=0))
    (root / "page.html").write_text("<p>plain</p>\n")
    (root / "copies-only.bin.gz").write_bytes(gzip.compress(JS, mtime=0))     # as the snapshot ships
    (root / "copies-only.bin.br").write_bytes(brotli.compress(JS))
    with serve.serving(root) as base:
        yield int(base.split(":")[-1].rstrip("/"))


def get(port: int, path: str, headers: dict | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    r.body = r.read()
    conn.close()
    return r


def decoded(r: http.client.HTTPResponse) -> bytes:
    coding = r.getheader("Content-Encoding")
    return {"br": brotli.decompress, "gzip": gzip.decompress, None: lambda b: b}[coding](r.body)


@pytest.mark.parametrize("header, coding", [
    ("gzip, deflate, br, zstd", "br"),          # what Chromium sends
    ("br", "br"), ("gzip", "gzip"), ("", None), ("identity", None),
    ("br;q=0.5, gzip", "gzip"), ("br;q=0, gzip", "gzip"), ("br, gzip;q=0", "br"),
    ("gzip;q=0.8, br;q=0.8", "br"),             # a tie goes to the smaller copy
    ("*", "br"), ("*;q=0", None), ("gzip;q=0, *", "br"), ("x-gzip", "gzip"), ("BR", "br"),
    ("br;q=bad, gzip;q=0.1", "gzip"),
])
def test_the_smallest_accepted_copy_is_sent(site, header, coding):
    assert serve.choose_encoding(header, ["br", "gzip"]) == coding
    r = get(site, "/app.js", {"Accept-Encoding": header})
    assert r.status == 200
    assert r.getheader("Content-Encoding") == coding
    assert r.getheader("Content-Type") == "text/javascript"
    assert r.getheader("Vary") == "Accept-Encoding"
    assert int(r.getheader("Content-Length")) == len(r.body)
    assert decoded(r) == JS


def test_brotli_is_not_sent_where_there_is_no_br_copy(site):
    r = get(site, "/only-gz.wasm", {"Accept-Encoding": "gzip, deflate, br"})
    assert (r.getheader("Content-Encoding"), r.getheader("Content-Type")) == ("gzip", "application/wasm")
    assert decoded(r) == b"\0asm" + JS
    assert serve.choose_encoding("br", ["gzip"]) is None


def test_a_file_with_no_copies_is_sent_as_it_is_without_vary(site):
    r = get(site, "/page.html", {"Accept-Encoding": "gzip, br"})
    assert r.getheader("Content-Encoding") is None and r.getheader("Vary") is None
    assert r.body == b"<p>plain</p>\n"


@pytest.mark.parametrize("header, coding", [("gzip, deflate, br", "br"), ("gzip", "gzip"), ("identity", None)])
def test_a_file_shipped_only_as_copies_is_negotiated_or_not_found(site, header, coding):
    """The memory snapshot's <name>.bin exists only as .br and .gz copies: a browser that
    takes either gets it decoded; one that takes neither gets 404 (and the worker then
    asks for <name>.bin.gz itself)."""
    r = get(site, "/copies-only.bin", {"Accept-Encoding": header})
    if coding is None:
        assert r.status == 404
        return
    assert (r.status, r.getheader("Content-Encoding")) == (200, coding)
    assert r.getheader("Content-Type") == "application/octet-stream" and r.getheader("Vary") == "Accept-Encoding"
    assert decoded(r) == JS
    assert get(site, "/copies-only.bin.gz", {"Accept-Encoding": header}).body == gzip.compress(JS, mtime=0)


def test_each_copy_has_its_own_etag_and_revalidates(site):
    br = get(site, "/app.js", {"Accept-Encoding": "br"})
    gz = get(site, "/app.js", {"Accept-Encoding": "gzip"})
    assert br.getheader("ETag") != gz.getheader("ETag")
    again = get(site, "/app.js", {"Accept-Encoding": "br", "If-None-Match": br.getheader("ETag")})
    assert again.status == 304 and again.body == b""
    other = get(site, "/app.js", {"Accept-Encoding": "gzip", "If-None-Match": br.getheader("ETag")})
    assert other.status == 200 and other.getheader("Content-Encoding") == "gzip"


def test_precompress_writes_br_copies_that_decode_to_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE", tmp_path / "cache")
    out = tmp_path / "site"
    out.mkdir()
    text = ("".join(f"<p>row {i} of the table</p>\n" for i in range(3000))).encode()
    (out / "page.html").write_bytes(text)
    (out / "small.js").write_text("let a = 1;\n")                         # under GZIP_MIN_BYTES
    (out / "wheel.whl").write_bytes(b"PK" + bytes(range(256)) * 100)     # not a compressible type
    output.precompress(out)
    br = (out / "page.html.br").read_bytes()
    assert brotli.decompress(br) == text
    assert gzip.decompress((out / "page.html.gz").read_bytes()) == text
    assert len(br) < (out / "page.html.gz").stat().st_size
    assert sorted(p.name for p in out.iterdir()) == ["page.html", "page.html.br", "page.html.gz", "small.js", "wheel.whl"]
    # the cache: a damaged cached copy is not used, a good one is
    cached = list((tmp_path / "cache/brotli").iterdir())
    assert [p.name for p in cached] == [f"{common.sha256_bytes(text)}-q11.br"]
    cached[0].write_bytes(b"not brotli")
    assert output.brotli_copy(text) == br
    assert cached[0].read_bytes() == br


def test_the_built_site_has_br_copies_of_its_largest_text_files(site_dir):
    manifest = json.loads((site_dir / "MANIFEST.json").read_text())["files"]
    wasm = "vendor/pyodide/pyodide.asm.wasm"
    assert f"{wasm}.br" in manifest and f"{wasm}.gz" in manifest
    assert manifest[f"{wasm}.br"][0] < 0.8 * manifest[f"{wasm}.gz"][0]
    for name in (wasm, "vendor/bokeh/bokeh.min.js", "ch04-batching.html"):
        if name in manifest:
            assert brotli.decompress((site_dir / f"{name}.br").read_bytes()) == (site_dir / name).read_bytes()
