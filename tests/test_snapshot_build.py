"""The memory snapshot the build makes (builder/snapshot.py, builder/snapshot.mjs): shipped
and listed like any file, named by its content, made again when an input changes, the same
bytes from the same inputs, and a clear error when it cannot be made."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess

import pytest

from builder import common, pages, snapshot
from builder.common import BuildError
from builder.runtime import PYODIDE_CORE_SHA256, PYODIDE_VERSION
from tests.test_build_reliability import finish


def config(site_dir) -> dict:
    page = next(p for p in sorted(site_dir.glob("ch*.html")) if "runtime: " in p.read_text())
    return json.loads(re.search(r"runtime: (\{.*?\}) \};", page.read_text()).group(1))["snapshot"]


def test_snapshot_is_shipped_named_by_its_content(site_dir):
    snap = config(site_dir)
    manifest = json.loads((site_dir / "MANIFEST.json").read_text())["files"]
    for key in ("memory", "files", "meta"):
        assert snap[key] in manifest, f"{snap[key]} is not in MANIFEST.json"
        assert snap["id"] in snap[key]
    memory = gzip.decompress((site_dir / snap["memory"]).read_bytes())
    files = gzip.decompress((site_dir / snap["files"]).read_bytes())
    meta = (site_dir / snap["meta"]).read_bytes()
    assert snapshot.content_id(memory, files, meta) == snap["id"]
    assert (len(memory), len(files)) == (snap["memory_size"], snap["files_size"])
    # the runtime build it belongs to, for the worker to reject another's
    m = json.loads(meta)
    asm = (site_dir / common.PYO / "pyodide.mjs").read_text()
    assert snap["build_id"] == m["build_id"] and f'BUILD_ID:"{m["build_id"]}"' in asm
    assert snap["pyodide"] == m["pyodide"] == PYODIDE_VERSION
    assert snap["wasm_sha256"] == PYODIDE_CORE_SHA256["pyodide.asm.wasm"]
    # Pyodide's snapshot header: magic, then the same build id
    assert memory[:4] == (1886286592).to_bytes(4, "little") == snapshot.SNAPSHOT_MAGIC
    # the memory less its zero pages at the top, which the worker makes by giving the memory
    # the full size; every shared library's region lies below them
    start = int.from_bytes(memory[4:8], "little")
    assert len(memory) < m["size"] and (len(memory) - start) % snapshot.WASM_PAGE == 0
    assert any(memory[-snapshot.WASM_PAGE:])
    assert all(d["memoryBase"] + d["memorySize"] <= len(memory) - start for d in m["dsos"])
    assert b"".join(int(m["build_id"][i:i + 8], 16).to_bytes(4, "little") for i in range(0, 64, 8)) == memory[16:48]
    # every page that starts the worker names this snapshot
    assert pages.worker_config(snap)["snapshot"] == snap
    # numpy's shared libraries are replayed from the shipped files
    assert files[:8] == b"GUIDEFS1"
    shipped = {p for p, _ in snapshot.unpack_files(files)}
    assert m["dsos"] and all(d["name"] in shipped for d in m["dsos"])
    # modules already imported are not shipped twice; those not imported are
    assert m["files_in_memory"] > 100
    assert not any(p.endswith("/numpy/__init__.pyc") or p.endswith("/panel/__init__.pyc") for p in shipped)
    assert any(p.endswith("/panel/template/__init__.pyc") for p in shipped)   # imported on first use


def test_the_zero_pages_at_the_top_of_the_memory_are_left_out():
    page = snapshot.WASM_PAGE
    head = snapshot.SNAPSHOT_MAGIC + (16).to_bytes(4, "little") + bytes(8)   # the memory begins at byte 16
    memory = bytearray(5 * page)
    memory[page + 3] = 1          # a zero page below data stays
    memory[3 * page - 1] = 2      # the last byte of the third page
    full = head + bytes(memory)
    trimmed = snapshot.trim_memory(full)
    assert trimmed == full[:16 + 3 * page]
    assert trimmed + bytes(len(full) - len(trimmed)) == full          # what fresh memory of the full size holds
    assert snapshot.trim_memory(head + bytes(2 * page)) == head
    with pytest.raises(BuildError, match="no Pyodide snapshot"):
        snapshot.trim_memory(b"junk" + bytes(page))


def test_snapshot_name_and_cache_key_follow_every_input(site_dir, tmp_path, monkeypatch):
    pyo = tmp_path / "pyodide"
    shutil.copytree(site_dir / common.PYO, pyo)
    base = snapshot.inputs_digest(pyo, "v20")
    assert snapshot.inputs_digest(pyo, "v20") == base
    assert snapshot.inputs_digest(pyo, "v22") != base
    wheel = next(pyo.glob(f"{common.GUIDE_DIST}-*.whl"))        # sim/ and widgets/ are in it
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    assert snapshot.inputs_digest(pyo, "v20") != base
    (pyo / "pyodide.asm.wasm.gz").write_bytes(b"not an input")    # compressed copies are not inputs
    changed = snapshot.inputs_digest(pyo, "v20")
    (pyo / "pyodide.asm.wasm.gz").unlink()
    assert snapshot.inputs_digest(pyo, "v20") == changed
    monkeypatch.setattr(snapshot, "BROTLI", {**snapshot.BROTLI, "quality": 9})     # how it is compressed
    assert snapshot.inputs_digest(pyo, "v20") != changed
    monkeypatch.undo()
    assert snapshot.inputs_digest(pyo, "v20") == changed
    a = snapshot.content_id(b"memory", b"files", b"meta")
    assert a != snapshot.content_id(b"memory", b"files", b"meta2")
    assert a != snapshot.content_id(b"memoryf", b"iles", b"meta")     # boundaries count
    assert snapshot.gzip_bytes(b"x" * 1000) == snapshot.gzip_bytes(b"x" * 1000)
    assert snapshot.gzip_bytes(b"x")[4:8] == b"\0\0\0\0"            # no time stamp


def test_snapshot_is_reproducible(site_dir, tmp_path):
    """Two runs of builder/snapshot.mjs write the same bytes (clock, randomness, time zone
    and hash seed fixed; packages installed one at a time), also when the builder's own
    time zone and locale differ (another TZ once moved numpy's libraries in memory)."""
    outs = [tmp_path / "a", tmp_path / "b"]
    envs = [os.environ, {**os.environ, "TZ": "America/New_York", "LC_ALL": "de_DE.UTF-8", "LANG": "de_DE.UTF-8"}]
    # both at once (separate processes, separate folders): as independent as two in a row
    runs = [subprocess.Popen([snapshot.node(), str(snapshot.SCRIPT), str(site_dir / common.PYO), str(out),
                              common.GUIDE_PACKAGE, common.PANEL_CDN_ROOT], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for out, env in zip(outs, envs)]
    for rc, log in [finish(p) for p in runs]:
        assert rc == 0, log[-3000:]
    for name in ("snapshot.bin", "files.bin", "meta.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), f"{name} differs between two runs"
    # and, finished as the build finishes it, it is what the build shipped
    snap = config(site_dir)
    assert snapshot.content_id(*snapshot.finish(outs[0], site_dir / common.PYO)) == snap["id"]


def test_the_standard_library_is_shipped_once(site_dir):
    """The snapshot's files hold Python's standard library zip less the sources of the
    modules already in memory, and no file the browser never reads (type stubs, pip's
    RECORD, Jupyter's extension); the rest of the zip is Pyodide's own, byte for byte."""
    import io
    import zipfile

    snap = config(site_dir)
    m = json.loads((site_dir / snap["meta"]).read_bytes())
    files = dict(snapshot.unpack_files(gzip.decompress((site_dir / snap["files"]).read_bytes())))
    assert m["stdlib_zip"] == "/lib/python312.zip" and "__pycache__/enum.cpython-312.pyc" in m["stdlib_in_memory"]
    original = zipfile.ZipFile(io.BytesIO((site_dir / common.PYO / "python_stdlib.zip").read_bytes()))
    reduced = zipfile.ZipFile(io.BytesIO(files[m["stdlib_zip"]]))
    names = set(reduced.namelist())
    assert "enum.py" not in names and "json/__init__.py" not in names           # imported: in memory
    assert {"graphlib.py", "mailbox.py"} <= names                              # not imported: shipped
    assert len(names) == len(original.namelist()) - len(m["stdlib_in_memory"])
    assert all(reduced.read(n) == original.read(n) for n in ("graphlib.py", "mailbox.py"))
    assert m["files_never_read"] > 0
    assert not [p for p in files if p.endswith(".pyi") or p.endswith(".dist-info/RECORD") or "/labextension/" in p]
    pyc = "/lib/python3.12/site-packages/widgets/__pycache__/{}.cpython-312.pyc"
    assert pyc.format("__init__") not in files and pyc.format("app") in files     # imported / not yet
    # the runtime's full zip is not what a restored page downloads
    assert "stdLibURL: EMPTY_ZIP" in (site_dir / "static" / "worker.js").read_text()


def test_a_module_missing_from_the_standard_library_is_a_build_error(site_dir):
    original = (site_dir / common.PYO / "python_stdlib.zip").read_bytes()
    assert len(snapshot.stdlib_zip(original, ["__pycache__/enum.cpython-312.pyc"])) < len(original)
    assert snapshot.stdlib_zip(original, []) == snapshot.stdlib_zip(original, [])
    with pytest.raises(BuildError, match="not in the runtime's standard library zip"):
        snapshot.stdlib_zip(original, ["__pycache__/no_such_module.cpython-312.pyc"])
    with pytest.raises(BuildError, match="no file pack"):
        snapshot.unpack_files(b"not a pack")
    assert snapshot.unpack_files(snapshot.pack_files([("/a", b"1"), ("/b/c", b"")])) == [("/a", b"1"), ("/b/c", b"")]


def test_no_node_is_a_clear_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GUIDE_NODE", str(tmp_path / "no-such-node"))
    with pytest.raises(BuildError, match="--no-snapshot"):
        snapshot.make_snapshot(tmp_path, "0" * 64)


def test_a_failing_snapshot_script_is_a_clear_build_error(tmp_path, monkeypatch):
    """The build stops with Node's own error and says how to build without a snapshot."""
    pyo = tmp_path / "site" / common.PYO
    pyo.mkdir(parents=True)
    (pyo / "pyodide.mjs").write_text("throw new Error('this runtime is broken');\n")
    monkeypatch.setattr(common, "CACHE", tmp_path / "cache")
    with pytest.raises(BuildError) as e:
        snapshot.make_snapshot(tmp_path / "site", "0" * 64)
    assert "this runtime is broken" in str(e.value) and "--no-snapshot" in str(e.value)
    assert not list((tmp_path / "cache" / "snapshot").glob(".making-*")), "a partial snapshot was left in the cache"


def test_a_snapshot_error_on_a_minified_line_keeps_its_message(tmp_path, monkeypatch):
    """An error thrown from a long minified line (as Pyodide's are) still reaches the build
    whole: Node's own report echoes that line first and could exit before the message."""
    pyo = tmp_path / "site" / common.PYO
    pyo.mkdir(parents=True)
    (pyo / "pyodide.mjs").write_text('const pad = "' + "x" * 400_000 + '"; throw new Error("Traceback: a figure failed to build");\n')
    monkeypatch.setattr(common, "CACHE", tmp_path / "cache")
    with pytest.raises(BuildError) as e:
        snapshot.make_snapshot(tmp_path / "site", "0" * 64)
    assert "Traceback: a figure failed to build" in str(e.value)


def test_the_compressed_copies_decode_to_what_was_compressed(tmp_path):
    """compress_all writes a gzip and a brotli copy of each part (at once, on threads), each
    decoding to its part, the same bytes each time."""
    import brotli

    parts = {"memory": bytes(range(256)) * 400 + b"tail", "files": b"GUIDEFS1" + bytes(5000)}
    for out in (tmp_path / "a", tmp_path / "b"):
        out.mkdir()
        snapshot.compress_all(out, parts)
    for name, data in parts.items():
        assert gzip.decompress((tmp_path / "a" / f"{name}.gz").read_bytes()) == data
        assert brotli.decompress((tmp_path / "a" / f"{name}.br").read_bytes()) == data
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["files.br", "files.gz", "memory.br", "memory.gz"]
    for p in (tmp_path / "a").iterdir():
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes()
