"""Browser tests of the memory snapshot (builder/snapshot.py, static/worker.js boot):

- a page restored from the snapshot (every figure built in it) and the same page booted
  normally (?boot=normal), which builds its figures, show identical figures: every data
  source and readout at load and after each control move;
- a snapshot that cannot be used (garbage instead of the file, or a page naming another
  runtime build) falls back to the normal boot: every figure goes live, no error shown.
"""
from __future__ import annotations

import json
import re
import shutil
import time

import brotli
import pytest

import widgets
from tests.browser import attach, wait_states
from tests.figures import COLLECT_JS, SET_JS, close, control_patch, cpython_state
from tests.test_site_browser import CHAPTERS, wait_equal
from tests.test_site_state import changes_of

pytestmark = pytest.mark.browser

# A 2-figure and a 3-figure chapter, and a 1-figure one with other kinds of control.
AB_PAGES = [c for c in CHAPTERS if c["file"] in ("ch04-batching.html", "ch09-speculative.html", "ch10-quantization.html")]
BOOT_JS = "() => window.__guide.boot"


def snapshot_config(site_dir) -> dict:
    page = next(c["file"] for c in CHAPTERS if c["figures"])
    m = re.search(r"runtime: (\{.*?\}) \};", (site_dir / page).read_text())
    return json.loads(m.group(1))["snapshot"]


def load(chromium, server, path, figures):
    page = chromium.new_page()
    log = attach(page, server)
    page.goto(server + path)
    states = wait_states(page, figures, timeout_s=180)
    return page, log, states


def state(page, figures) -> dict:
    return {f: page.evaluate(COLLECT_JS, [f, "live"]) for f in figures}


@pytest.mark.parametrize("chapter", AB_PAGES, ids=[c["file"] for c in AB_PAGES])
def test_snapshot_and_normal_boot_show_identical_figures(chromium, server, site_dir, chapter):
    assert snapshot_config(site_dir), "the build made no snapshot"
    figures = chapter["figures"]
    snap, snap_log, states = load(chromium, server, chapter["file"], figures)
    normal = None
    try:
        assert states == {f: "live" for f in figures}
        booted = snap.evaluate(BOOT_JS)
        assert booted["path"] == "snapshot" and booted["reason"] in ("network", "cache"), booted
        assert list(booted["steps"]) == ["storage", "runtime", "files", "libraries", "snapshot_bytes", "restored"]
        # the snapshot held every figure built, and Python's garbage collector frozen
        assert booted["held"]["prebuilt"] == sorted(widgets.FIGURES), booted["held"]
        assert booted["held"]["frozen"] > 0, booted["held"]
        # the standard library's zip installed at restore was read by every importer of it:
        # the package's own as well (widgets.runtime.refresh_zip_importers)
        assert booted["held"]["zip_importers"] > 1, booted["held"]
        normal, normal_log, states = load(chromium, server, chapter["file"] + "?boot=normal", figures)
        assert states == {f: "live" for f in figures}
        assert normal.evaluate(BOOT_JS) == {"path": "normal", "reason": "asked for (boot=normal)"}
        at_load = state(snap, figures)
        assert at_load == state(normal, figures)
        assert all(s["sources"] or s["readouts"] for s in at_load.values()), at_load
        for fid in figures:
            changes = changes_of(fid)
            assert changes, f"{fid} has no control to move"
            before = at_load[fid]
            for i, (key, value, _) in enumerate(changes):
                patch = control_patch(fid, key, value)
                for page in (snap, normal):
                    page.evaluate(SET_JS, [fid, key, patch])
                expected = cpython_state(fid, [(k, v) for k, v, _ in changes[:i + 1]])
                shown = wait_equal(snap, fid, expected)
                assert wait_equal(normal, fid, expected) == shown, f"{fid}.{key}: the two boots differ"
                assert close(shown, before), f"{fid}.{key}: moving it changed nothing"
                before = shown
        assert snap_log.errors() == [] and normal_log.errors() == [], snap_log.errors() + normal_log.errors()
    finally:
        snap.close()
        if normal:
            normal.close()


def brotli_name(url: str) -> str:
    """<name>.bin.br, the brotli copy of the snapshot file <name>.bin.gz (builder/snapshot.py)."""
    assert url.endswith(".bin.gz"), url
    return url[:-3] + ".br"


@pytest.mark.parametrize("encodings", [(("br", ".br"), ("gzip", ".gz")), (("gzip", ".gz"),), ()],
                         ids=["brotli-host", "gzip-host", "plain-host"])
def test_the_snapshot_comes_as_the_host_can_send_it(chromium, site_dir, monkeypatch, encodings):
    """A host that serves precompressed copies sends the snapshot as brotli (or gzip) for the
    browser to decode; one that serves files only as they are answers <name>.bin with 404 and
    the worker gunzips <name>.bin.gz itself. Either way the page restores the same snapshot."""
    from builder import serve
    from builder.serve import serving

    monkeypatch.setattr(serve, "ENCODINGS", encodings)
    chapter = next(c for c in CHAPTERS if c["file"] == "ch04-batching.html")
    snap = snapshot_config(site_dir)
    counters = {}
    with serving(site_dir, counters=counters) as base:     # another origin: nothing stored yet
        page, log, states = load(chromium, base, chapter["file"], chapter["figures"])
        try:
            assert states == {f: "live" for f in chapter["figures"]}
            booted = page.evaluate(BOOT_JS)
            want = {"br": "br", "gzip": "gzip"}.get(encodings[0][0] if encodings else "", "gunzip")
            assert booted["path"] == "snapshot" and booted["transfer"] == {"memory": want, "files": want}, booted
            assert log.errors() == [], log.errors()
        finally:
            page.close()
    for key in ("memory", "files"):
        negotiated, gz = "/" + snap[key][:-3], "/" + snap[key]
        copy = {"br": brotli_name(snap[key]), "gzip": snap[key]}.get(want)
        if copy:      # the copy sent for <name>.bin, and the .gz not fetched
            assert counters[negotiated][1] == (site_dir / copy).stat().st_size and gz not in counters
        else:         # <name>.bin not found (nothing sent), then the .gz as it is
            assert negotiated not in counters or counters[negotiated][1] == 0
            assert counters[gz][1] == (site_dir / snap[key]).stat().st_size


def broken_copy(site_dir, tmp_path, how: str):
    """A copy of the site whose snapshot cannot be used."""
    copy = tmp_path / "site"
    shutil.copytree(site_dir, copy)
    snap = snapshot_config(site_dir)
    if how == "garbage":
        (copy / snap["memory"]).write_bytes(b"\x1f\x8b\x08 not really gzip " * 1000)
        # the brotli copy a negotiating host sends: well-formed brotli, not a snapshot
        (copy / brotli_name(snap["memory"])).write_bytes(brotli.compress(b"not a snapshot " * 1000))
    elif how == "other-build":
        for page in copy.glob("*.html"):
            page.write_text(page.read_text().replace(snap["build_id"], "0" * 64))
            for ext in (".gz", ".br"):                                       # served instead, if there
                page.with_name(page.name + ext).unlink(missing_ok=True)
    elif how == "missing-files":
        (copy / snap["files"]).unlink()
        (copy / brotli_name(snap["files"])).unlink()
    return copy


@pytest.mark.parametrize("how", ["garbage", "other-build", "missing-files"])
def test_an_unusable_snapshot_falls_back_to_the_normal_boot(chromium, site_dir, tmp_path, how):
    from builder.serve import serving

    chapter = next(c for c in CHAPTERS if c["file"] == "ch04-batching.html")
    copy = broken_copy(site_dir, tmp_path, how)
    with serving(copy) as base:     # another port: another origin, with nothing stored yet
        page, log, states = load(chromium, base, chapter["file"], chapter["figures"])
        try:
            assert states == {f: "live" for f in chapter["figures"]}
            booted = page.evaluate(BOOT_JS)
            assert booted["path"] == "normal" and booted["reason"].startswith("snapshot failed"), booted
            assert log.errors() == [], log.errors()
            shown = state(page, chapter["figures"])
            for fid in chapter["figures"]:
                assert close(shown[fid], cpython_state(fid)) == [], fid
            warned = [t for _, t in log.console if "memory snapshot not used" in t]
            assert warned, log.console
        finally:
            page.close()


KEPT_JS = """async (id) => (await caches.has(`guide-snapshot-${id}`))
  && (await (await caches.open(`guide-snapshot-${id}`)).keys()).length === 2"""
SPOIL_JS = """async ([id, url, size]) => {
  const cache = await caches.open(`guide-snapshot-${id}`);
  await cache.put(new URL(url, location.href).href, new Response(new Uint8Array(size)));   // right size, all zeros
}"""


def test_the_kept_snapshot_is_read_back_and_a_spoiled_one_dropped(chromium, site_dir):
    """After a page went live, the worker keeps the decompressed snapshot in Cache Storage and
    the next page restores from it; a kept copy that does not restore falls back to the normal
    boot without an error shown, and is dropped, so the page after that uses the server's."""
    from builder.serve import serving

    chapter = next(c for c in CHAPTERS if c["file"] == "ch04-batching.html")
    snap = snapshot_config(site_dir)
    with serving(site_dir) as base:     # another port: another origin, with nothing stored yet
        boots = []
        for visit in range(4):
            page, log, states = load(chromium, base, chapter["file"], chapter["figures"])
            try:
                assert states == {f: "live" for f in chapter["figures"]}, visit
                assert log.errors() == [], log.errors()
                boots.append(page.evaluate(BOOT_JS))
                if visit in (0, 3):     # the worker keeps it soon after the figures went live
                    deadline = time.monotonic() + 60
                    while not page.evaluate(KEPT_JS, snap["id"]):
                        assert time.monotonic() < deadline, "the snapshot was not kept in Cache Storage"
                        page.wait_for_timeout(200)
                if visit == 1:
                    page.evaluate(SPOIL_JS, [snap["id"], snap["memory"], snap["memory_size"]])
                if visit == 2:
                    kept_after_failure = page.evaluate(f"caches.has('guide-snapshot-{snap['id']}')")
            finally:
                page.close()
    assert [(b["path"], b["reason"][:15]) for b in boots] == [
        ("snapshot", "network"), ("snapshot", "cache"), ("normal", "snapshot failed"), ("snapshot", "network")], boots
    assert kept_after_failure is False
