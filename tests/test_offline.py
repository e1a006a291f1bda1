"""Offline reading (site/static/sw.js, site/static/offline.js), in headless Chromium.

One visit saves the whole build into Cache Storage; then, with the server gone and the
browser offline, every chapter's figures go live and the other pages open. A new build
(a changed MANIFEST.json) replaces the saved copy, and a Cache Storage that hangs or
refuses leaves the pages working. Each test has a browser profile and a server of its own,
so no service worker outlives it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from builder import output, pages
from builder.serve import serving
from tests.browser import attach, chromium_context, wait_async, wait_states
from tests.conftest import built_chapters
from tests.figures import SET_JS, control_patch

pytestmark = pytest.mark.browser

CHAPTERS = built_chapters()
FIRST = next(c for c in CHAPTERS if c["figures"])       # the chapter visited online

OFFLINE_JS = "() => document.documentElement.dataset.offline"
CACHES_JS = "async () => (await caches.keys()).filter((n) => n.startsWith(\"guide-offline-\"))"   # the offline copies (the snapshot kept by the Python worker has its own caches)
KEPT_SNAPSHOT_JS = """async () => { for (const n of await caches.keys()) if (n.startsWith("guide-snapshot-")
  && (await (await caches.open(n)).keys()).length === 2) return true; return false; }"""
SCRIPT_CACHES_JS = "async () => (await caches.keys()).filter((n) => n.startsWith(\"guide-scripts-\"))"
CACHED_URLS_JS = """async (name) => (await (await caches.open(name)).keys()).map(r => r.url)"""
# each resource of the page: [url, deliveryType, whether the service worker had a fetch event for it]
SCRIPT_DELIVERY_JS = """() => performance.getEntriesByType("resource").map(
  (e) => [e.name, e.deliveryType || "", e.workerStart > 0])"""


def cache_name(site: Path) -> str:
    return "guide-offline-" + hashlib.sha256((site / "MANIFEST.json").read_bytes()).hexdigest()[:20]


def offline_files(site: Path) -> list[str]:
    """What the saved copy must hold: every file of the manifest but the .gz/.br copies and
    the memory snapshot's big files (the page's worker keeps those itself)."""
    files = json.loads((site / "MANIFEST.json").read_text())["files"]
    snapshot = re.compile(r"vendor/snapshot/[^/]+\.bin\.(gz|br)")
    return sorted(p for p in files if not (p.endswith((".gz", ".br")) and p.rsplit(".", 1)[0] in files)
                  and not snapshot.fullmatch(p))


@pytest.fixture
def browser(playwright_session):
    with chromium_context(playwright_session) as ctx:
        yield ctx


# every state the offline note passes through, with its text
TRACK_NOTE_JS = """
window.__offline = [];
new MutationObserver(() => {
  const note = document.querySelector('.offline-note');
  window.__offline.push([document.documentElement.dataset.offline, note && note.textContent]);
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-offline']});
"""


def visit(ctx, url: str, figure_ids: list[str], offline_state: str | None = "ready"):
    """Open `url`, wait for its figures to be live and (if given) for the offline note's state."""
    page = ctx.new_page()
    page.add_init_script(TRACK_NOTE_JS)
    log = attach(page, url.split("/")[0] + "//" + url.split("/")[2] + "/")
    page.goto(url)
    if figure_ids:
        states = wait_states(page, figure_ids, timeout_s=180)
        assert states == {f: "live" for f in figure_ids}, (states, log.console, log.failed)
    if offline_state:
        page.wait_for_function(f"({OFFLINE_JS})() === {json.dumps(offline_state)}", timeout=120000, polling=100)
    return page, log


def test_every_chapter_goes_live_offline_after_one_visit(browser, site_dir):
    with serving(site_dir) as base:
        page, log = visit(browser, base + FIRST["file"], FIRST["figures"])
        note = page.locator(".offline-note")
        assert note.is_visible() and note.text_content().startswith("Available offline")
        seen = page.evaluate("window.__offline")
        files = json.loads((site_dir / "MANIFEST.json").read_text())["files"]
        total = sum(files[p][0] for p in offline_files(site_dir))
        assert seen[0] == ["saving", f"Saving the guide for offline reading: 0% (0.0 of {total / 1e6:.1f} MB)."]
        assert {s for s, _ in seen} == {"saving", "ready"} and seen[-1][0] == "ready"
        name = cache_name(site_dir)
        assert page.evaluate(CACHES_JS) == [name]
        cached = sorted(u[len(base):] for u in page.evaluate(CACHED_URLS_JS, name))
        assert cached == sorted(offline_files(site_dir) + ["MANIFEST.json"])
        assert log.errors() == [] and log.failed == [] and log.off_site() == []
        # the snapshot's big files are not in the copy: the Python worker keeps them, decompressed
        wait_async(page, KEPT_SNAPSHOT_JS, timeout_s=60)
        page.close()
    # the server is gone, the browser still online: the loads of the big scripts, which the
    # service worker leaves to the network, fail, and the page and its Python worker take
    # them from the copy ("?copy"; the worker's module is not among the page's resources)
    page, log = visit(browser, base + FIRST["file"], FIRST["figures"], offline_state=None)
    loaded = page.evaluate(SCRIPT_DELIVERY_JS)
    for path in install_scripts(site_dir):
        assert [base + path + "?copy", "cache-storage", True] in loaded, (path, loaded)
    page.close()
    # the server is gone and the browser offline: nothing can come from the network
    browser.set_offline(True)
    for c in CHAPTERS:
        page, log = visit(browser, base + c["file"], c["figures"], offline_state=None)
        assert page.locator("h1").first.text_content().strip().endswith(c["title"]), c["file"]
        if c["figures"]:
            booted = page.evaluate("window.__guide.boot")
            assert (booted["path"], booted["reason"]) == ("snapshot", "cache"), (c["file"], booted)
        page.wait_for_timeout(100)
        assert log.errors() == [], (c["file"], log.errors())
        page.close()
    for name, heading in (("references.html", "References"), ("index.html", "LLM inference, live"), ("", "LLM inference, live")):
        page, log = visit(browser, base + name, [], offline_state=None)
        assert page.locator("h1").first.text_content() == heading
        assert page.locator("main a").count() > 10
        page.close()
    # a figure on its own page, as a slide embeds it (the address's query is not part of the key)
    fid = FIRST["figures"][0]
    page, log = visit(browser, f"{base}figure-{fid}.html?embed=1", [fid], offline_state=None)
    assert page.evaluate("document.documentElement.classList.contains('embed')")
    assert not page.locator(".offline-note").is_visible()
    page.close()


REGISTERED_JS = "async () => !!(await navigator.serviceWorker.getRegistration())"
NOTE_TEXT_JS = "() => (document.querySelector('.offline-note') || {}).textContent || ''"


def keep_moving(page, figure_id: str, key: str, values: list, at, seconds: float, check=None, until=None,
                times: list | None = None):
    """Move control `key`, which is at `at` (one of `values`), to the next of `values` in
    turn, one change every 200 ms, for `seconds` (each change recomputes in Python), or
    until `until()` is true (which must happen within `seconds`); call `check()` after each,
    and add the page's clock at each change to `times`. Returns the value it was left at."""
    patches = {(a, b): control_patch(figure_id, key, b, start=a) for a in values for b in values if a != b}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        to = values[(values.index(at) + 1) % len(values)]
        page.evaluate(SET_JS, [figure_id, key, patches[(at, to)]])
        if times is not None:
            times.append(page.evaluate("performance.now()"))
        at = to
        page.wait_for_timeout(200)
        if check:
            check()
        if until and until():
            return at
    assert until is None, f"still moving after {seconds} s: {page.evaluate(NOTE_TEXT_JS)!r}"
    return at


def test_saving_for_later_waits_while_the_reader_moves_the_figures(browser, site_dir):
    """A reader who moves a control as the figures go live, and goes on moving it, has the
    machine to their figure's recomputation: nothing is saved for later (the service worker
    is not registered, so no offline copy; the Python worker keeps no memory snapshot) until
    they leave the figures alone for a second, and no sooner than 3 s after the figures went
    live (guide.js whenQuiet, worker.js). Then both are saved; a reader's changes while the
    copy is being saved pause it (sw.js "reader"), and it completes once they stop."""
    fid = "ch00-decode-meter"
    assert fid in FIRST["figures"]
    with contextlib.ExitStack() as stack:
        # (Saving waits for AFTER_LIVE_MS, 3 s, after the figures went live and QUIET_MS, 1 s,
        # after the last change: a machine that stalls the page for 0.75 s between two changes,
        # or 2.25 s before the first, lets it begin, rightly. Such a stall is seen in the page's
        # clock, and the visit is then tried again on a new server (a new origin: no service
        # worker, no copy, no snapshot), at most three times.)
        for attempt in range(3):
            server = contextlib.ExitStack()
            base = stack.enter_context(server).enter_context(serving(site_dir))
            page, log = visit(browser, base + FIRST["file"], FIRST["figures"], offline_state=None)
            saved = []

            def nothing_saved() -> None:
                state = (page.evaluate(REGISTERED_JS), page.evaluate(OFFLINE_JS), page.evaluate(KEPT_SNAPSHOT_JS))
                if state != (False, None, False) and not saved:
                    saved.append(state)

            nothing_saved()
            times = [max(t for k, t in page.evaluate("window.__guide.timing").items() if k.startswith("live:"))]
            at = keep_moving(page, fid, "batch", [1, 64], 1, 5.0, nothing_saved, times=times)     # from the default, 1
            if not saved:
                break
            stalled = times[1] - times[0] > 2250 or any(b - a > 750 for a, b in zip(times[1:], times[2:]))
            assert stalled, f"saved while the reader moved a figure ({saved[0]}; page clock at live and at each change: {times})"
            page.close()
            server.close()      # the copy begun there stops, its files gone
        else:
            raise AssertionError("the page stalled in each of three tries")
        page.wait_for_function(f"({OFFLINE_JS})() === 'saving'", timeout=60000, polling=20)
        # the copy under way: the reader moves again; once the files in flight are stored, the
        # copy says it is paused, and goes no further until they stop
        # (The pause lasts while the page tells the copy of a change at least every QUIET_MS,
        # 1 s, and it tells at most every 250 ms: a machine that stalls the page for 0.75 s
        # between two changes lets the copy go on, rightly. Such a stall is seen in the page's
        # clock, and the hold is then tried again, at most three times.)
        paused = "paused while you move the figures."
        for attempt in range(3):
            at = keep_moving(page, fid, "batch", [1, 64], at, 30.0,
                             until=lambda: page.evaluate(NOTE_TEXT_JS).endswith(paused))
            held = page.evaluate(NOTE_TEXT_JS)
            assert held.startswith("Saving the guide") and held.endswith(paused), held
            times, changed = [], []

            def copy_held() -> None:
                if page.evaluate(NOTE_TEXT_JS) != held:
                    changed.append(page.evaluate(NOTE_TEXT_JS))

            at = keep_moving(page, fid, "batch", [1, 64], at, 2.0, copy_held, times=times)
            stall = max(b - a for a, b in zip(times, times[1:]))
            if not changed:
                break
            assert stall > 750, f"the copy went on while the reader moved a figure (changes at most {stall:.0f} ms apart): {held!r} -> {changed[0]!r}"
        else:
            raise AssertionError("the page stalled for 0.75 s in each of three tries")
        assert page.evaluate(OFFLINE_JS) == "saving"
        # left alone, it goes on (and says so)
        page.wait_for_function(f"!({NOTE_TEXT_JS})().endsWith({paused!r})", timeout=10000, polling=20)
        page.wait_for_function(f"({OFFLINE_JS})() === 'ready'", timeout=120000, polling=100)
        wait_async(page, KEPT_SNAPSHOT_JS, timeout_s=60)
        name = cache_name(site_dir)
        cached = sorted(u[len(base):] for u in page.evaluate(CACHED_URLS_JS, name))
        assert cached == sorted(offline_files(site_dir) + ["MANIFEST.json"])
        assert log.errors() == [] and log.off_site() == []
        page.close()


def install_scripts(site: Path) -> dict[str, str]:
    """The classic scripts sw.js stores at install (INSTALL_SCRIPTS, written by the build): path -> sha256."""
    m = re.search(r"^const INSTALL_SCRIPTS = (\{.*?\});$", (site / "sw.js").read_text(), re.S | re.M)
    return json.loads(m.group(1))


def page_runtime_module(site: Path) -> str:
    """The module sw.js has pages run once from a copy just saved (RUNTIME_MODULES)."""
    (path,) = json.loads(re.search(r"^const RUNTIME_MODULES = (\[.*?\]);$", (site / "sw.js").read_text(), re.M).group(1))
    return path


def traced_compiles(ctx, url: str, figure_ids: list[str]) -> tuple[dict[str, dict], dict[str, list]]:
    """Open `url` with a devtools trace running until its figures are live: ({script url:
    the data of V8's compile event, module scripts' too} (cacheKind, consumedCacheSize,
    cacheRejected), {url: [deliveryType, through the service worker]} of the page's resources)."""
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    events, done = [], []
    cdp.on("Tracing.dataCollected", lambda e: events.extend(e["value"]))
    cdp.on("Tracing.tracingComplete", lambda e: done.append(True))
    cdp.send("Tracing.start", {"traceConfig": {"includedCategories": ["devtools.timeline", "v8"]},
                               "transferMode": "ReportEvents"})
    page.goto(url)
    assert wait_states(page, figure_ids, timeout_s=180) == {f: "live" for f in figure_ids}
    delivered = {name: [kind, by_worker] for name, kind, by_worker in page.evaluate(SCRIPT_DELIVERY_JS)}
    cdp.send("Tracing.end")
    for _ in range(300):
        if done:
            break
        page.wait_for_timeout(100)
    page.close()
    compiled = {d["url"]: d for e in events if e.get("name") in ("v8.compile", "v8.compileModule")
                for d in [(e.get("args") or {}).get("data") or {}] if d.get("url")}
    return compiled, delivered


def test_online_the_big_scripts_run_from_code_kept_beside_the_http_cache(playwright_session, site_dir, tmp_path):
    """Online, the service worker leaves BokehJS, Panel's bundle (INSTALL_SCRIPTS) and Pyodide's
    runtime module (RUNTIME_MODULES) to the network: Chrome keeps the code it compiled for
    them beside their HTTP cache entries from their second load on, which the page that
    saved the offline copy makes, and the next page runs them from it (V8's compile event:
    not rejected, more than half the script's size consumed). Offline they come from the scripts' own
    cache, which the worker fills at install, also after a new build that kept them, and
    anew after one that changed one."""
    scripts = install_scripts(site_dir)
    assert scripts, "sw.js lists no scripts to store at install"
    for path, digest in scripts.items():
        assert hashlib.sha256((site_dir / path).read_bytes()).hexdigest() == digest, path
    profile = tmp_path / "profile"
    root = tmp_path / "site"
    shutil.copytree(site_dir, root)
    module = page_runtime_module(root)

    def from_kept_code(traced: tuple, base: str) -> None:
        compiled, delivered = traced
        for path in [*scripts, module]:
            if path in scripts:     # the browser's HTTP cache answered, not Cache Storage
                assert delivered.get(base + path, [""])[0] == "cache", (path, delivered)
            event = compiled.get(base + path)
            assert event, (path, sorted(compiled))
            assert event.get("cacheRejected") is False, (path, event)
            assert event.get("consumedCacheSize", 0) > (root / path).stat().st_size // 2, (path, event)

    def from_install_cache(ctx, base: str) -> None:
        # (Chrome drops the code it kept for a script that a page then got from Cache Storage)
        ctx.set_offline(True)
        compiled, delivered = traced_compiles(ctx, base + FIRST["file"], FIRST["figures"])
        for path in scripts:
            # answered by the worker, which saw the browser offline; or, where it did not
            # (Playwright's offline switch does not always reach a service worker), the page's
            # load failed and it asked for the copy (static/guide.js)
            assert ["cache-storage", True] in (delivered.get(base + path), delivered.get(base + path + "?copy")), \
                (path, {k: v for k, v in delivered.items() if "/vendor/" in k})
        ctx.set_offline(False)

    with serving(root) as base:
        port = int(base.split(":")[-1].rstrip("/"))
        with chromium_context(playwright_session, profile) as ctx:
            page, log = visit(ctx, base + FIRST["file"], FIRST["figures"])
            assert page.evaluate("window.__guide.scripts") == list(scripts)    # all the page loads, in order
            # the copy saved, the page runs the worker's big module and its classic scripts once
            # more (static/offline.js), so that the next page runs them from kept code
            page.wait_for_function("document.documentElement.dataset.compiled === 'done'", timeout=60000, polling=100)
            assert log.errors() == []
            page.close()
        with chromium_context(playwright_session, profile) as ctx:
            from_kept_code(traced_compiles(ctx, base + FIRST["file"], FIRST["figures"]), base)
    # a new build with the same scripts (sw.js unchanged, no new install): their cache stays,
    # and online their code kept beside the HTTP cache is still used
    swap_build(root, "index.html", "build-b")
    assert install_scripts(root) == scripts
    with serving_on(root, port) as base:
        with chromium_context(playwright_session, profile) as ctx:
            page, _ = visit(ctx, base + "index.html", [])
            assert page.evaluate(CACHES_JS) == [cache_name(root)]
            kept = page.evaluate(SCRIPT_CACHES_JS)
            assert len(kept) == 1, kept
            page.close()
        with chromium_context(playwright_session, profile) as ctx:
            from_kept_code(traced_compiles(ctx, base + FIRST["file"], FIRST["figures"]), base)
            from_install_cache(ctx, base)
    # a build that changes one of them: sw.js changes, its worker installs and stores them
    # anew, and the older list's cache goes
    changed = list(scripts)[-1]
    with open(root / changed, "a") as f:
        f.write("\n// another build\n")
    for suffix in (".gz", ".br"):
        (root / (changed + suffix)).unlink(missing_ok=True)
    (root / "sw.js").write_text(pages.service_worker(root, list(scripts)))
    for suffix in (".gz", ".br"):
        (root / ("sw.js" + suffix)).unlink(missing_ok=True)
    (root / "MANIFEST.json").unlink()
    output.write_manifest(root)
    scripts = install_scripts(root)
    assert scripts[changed] != install_scripts(site_dir)[changed]
    with serving_on(root, port) as base:
        with chromium_context(playwright_session, profile) as ctx:
            page, _ = visit(ctx, base + FIRST["file"], FIRST["figures"])
            # the new worker installed (its cache holds every script) and activated (the older one is gone)
            wait_async(page, f"""async () => {{ const k = await ({SCRIPT_CACHES_JS})();
                return k.length === 1 && k[0] !== {json.dumps(kept[0])}
                    && (await (await caches.open(k[0])).keys()).length === {len(scripts)}; }}""", timeout_s=60)
            page.close()
        with chromium_context(playwright_session, profile) as ctx:
            from_install_cache(ctx, base)
            page, _ = visit(ctx, base + "index.html", [])       # what the copy holds is the new file
            assert page.evaluate("async (u) => (await (await fetch(u)).text()).endsWith('// another build\\n')",
                                 base + changed + "?copy")
            page.close()


def swap_build(root: Path, page: str, marker: str) -> None:
    """Turn the site in `root` into another build: `page` changed, its precompressed copies
    gone, MANIFEST.json rewritten (as a deploy of a new build would)."""
    p = root / page
    p.write_text(p.read_text().replace("</main>", f'<p id="{marker}">{marker}</p>\n</main>', 1))
    for suffix in (".gz", ".br"):
        p.with_name(p.name + suffix).unlink(missing_ok=True)
    (root / "MANIFEST.json").unlink()
    output.write_manifest(root)


@contextlib.contextmanager
def serving_on(root: Path, port: int):
    with serving(root, port) as base:
        yield base


def test_a_new_build_replaces_the_saved_copy(browser, site_dir, tmp_path):
    root = tmp_path / "site"
    shutil.copytree(site_dir, root)
    chapter = FIRST
    old_name = cache_name(root)
    with serving(root) as base:
        port = int(base.split(":")[-1].rstrip("/"))
        page, _ = visit(browser, base + chapter["file"], chapter["figures"])
        assert page.evaluate(CACHES_JS) == [old_name]
        page.close()
    # offline, a page comes from the saved copy of build A
    browser.set_offline(True)
    stale, _ = visit(browser, base + "index.html", [], offline_state="ready")
    assert stale.locator("#build-b").count() == 0
    assert stale.locator(".offline-note").text_content() == "Available offline: you are reading the saved copy."
    # build B is deployed at the same address; the network is back
    swap_build(root, "index.html", "build-b")
    new_name = cache_name(root)
    assert new_name != old_name
    browser.set_offline(False)
    with serving_on(root, port) as base:
        page, log = visit(browser, base + "index.html", [])
        assert page.locator("#build-b").count() == 1          # a page opened online is the newest
        assert page.evaluate(CACHES_JS) == [new_name]          # the old copy is gone
        cached = sorted(u[len(base):] for u in page.evaluate(CACHED_URLS_JS, new_name))
        assert cached == sorted(offline_files(root) + ["MANIFEST.json"])
        # the page that was opened from the old copy is told to reload
        stale.wait_for_function("document.querySelector('.offline-note')?.dataset.offline === 'reload'", timeout=30000)
        assert stale.locator(".offline-note").text_content().startswith("A newer version of the guide is available")
        assert stale.locator(".offline-note a").text_content() == "reload"
        assert log.errors() == [] and log.failed == []
        page.close()
        stale.close()
    # offline again: build B's page, and a chapter whose files were kept from build A goes live
    browser.set_offline(True)
    page, _ = visit(browser, base + "index.html", [], offline_state=None)
    assert page.locator("#build-b").count() == 1
    page.close()
    page, log = visit(browser, base + chapter["file"], chapter["figures"], offline_state=None)
    assert log.errors() == []
    page.close()


# Cache Storage that never answers, or refuses (as when the disk quota is used up)
STUBS = {
    "hangs": "caches.open = () => new Promise(() => {}); caches.keys = () => new Promise(() => {});\n",
    "refuses": ("caches.open = () => Promise.reject(new DOMException('quota', 'QuotaExceededError'));\n"
                "caches.keys = () => Promise.reject(new DOMException('denied', 'SecurityError'));\n"),
}


@pytest.mark.parametrize("fault", list(STUBS))
def test_a_failing_cache_storage_leaves_the_pages_working(browser, site_dir, tmp_path, fault):
    root = tmp_path / "site"
    root.mkdir()
    for p in site_dir.iterdir():                       # the same site, but for sw.js (and its copies)
        if not p.name.startswith("sw.js"):
            os.symlink(p, root / p.name)
    (root / "sw.js").write_text(STUBS[fault] + (site_dir / "sw.js").read_text())
    chapter = FIRST
    with serving(root) as base:
        page, log = visit(browser, base + chapter["file"], chapter["figures"], offline_state="failed")
        assert page.locator(".offline-note").text_content().startswith("Not saved for offline reading")
        assert log.errors() == []
        page.close()
        # the worker now answers every request: they go to the network
        page, log = visit(browser, base + chapter["file"], chapter["figures"], offline_state="failed")
        assert page.evaluate("navigator.serviceWorker.controller !== null")
        assert log.errors() == [] and log.failed == [] and log.off_site() == []
        page.close()


def test_pages_opened_from_a_file_work_without_the_service_worker(browser, site_dir):
    page = browser.new_page()
    log = attach(page, site_dir.as_uri() + "/")
    page.goto((site_dir / "references.html").as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    assert page.evaluate("navigator.serviceWorker?.controller ?? null") is None
    assert page.locator(".offline-note").count() == 0
    assert log.errors() == []
    page.close()
