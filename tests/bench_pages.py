#!/usr/bin/env python3
"""Benchmark the chapter pages in headless Chromium and print the figures.

    ./dev bench                                   # every chapter page with figures
    ./dev bench --pages ch04-batching.html ch09-speculative.html --runs 3
    ./dev bench --proof ../shared/runtime-proof   # also that reference proof, same run
    ./dev bench --mobile                          # on a phone: 390 px, CPU 4x slower, touch

Three ways to start Python, measured alternately in one run (the order flips every run),
so that a shared machine's drift hits them alike:
- snapshot: the page as built (its worker restores the build's memory snapshot);
- normal: the page with ?boot=normal (boot Pyodide, install the wheels, import);
- bare: a page the bench serves itself from the site's vendored runtime that only boots
  Pyodide and imports numpy (the floor any loader stands on).
For each page and way, over several runs (median and min-max): "cold" on a fresh browser
profile (first visit), "warm" on that profile after the first visit (a new browser on the
same profile: HTTP cache, and Cache Storage, where the worker keeps the decompressed
snapshot once a page went live, and the service worker the offline copy; the bench waits
for both to be written, as a reader reading the page would):
- live: every figure of the page live (Python started, figures built and swapped in);
- poster / preview painted: the build-time poster, the pre-rendered Bokeh document (cold);
- redraw: controls moved 20 times, the page's figures taking turns (each figure's first
  slider, else its first menu or button group); time until the first of the figure's data or readouts
  changed (data), until the last of them changed (done), and until the next frame after
  that was painted (painted), p50 and p95, on the first visit (cold runs: the moves begin
  as the figures go live, as a reader's who waited for them; the page keeps the snapshot
  and saves the offline copy once the moves have stopped for a second, static/guide.js
  whenQuiet) and on a later visit (warm runs);
- bytes: what the server sent on the first visit (compressed as served), and for the next
  chapter's page on the profile that has visited this one (first run only).
Each run also checks the way it asked for was taken (window.__guide.boot).
The pages load in a browser with no inspector attached to them (tests/pipe_browser.py), as
in a reader's: Playwright inspects a page's workers, which slows Python's start in them
(by up to 0.4 s). `--driver playwright` loads them through Playwright instead;
either way the times are the page's own marks (window.__guide.timing).
It is a benchmark, not a test: it prints numbers and exits 0 unless a page fails.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.common import CACHE  # noqa: E402
from builder.pages import read_chapters  # noqa: E402
from builder.runtime import PYODIDE_VERSION, WASM_CARRIER_FILE  # noqa: E402
from builder.serve import serving  # noqa: E402
from tests.browser import attach, chromium_context, wait_states  # noqa: E402
from tests.figures import collect, control_patch  # noqa: E402
from tests.pipe_browser import DESKTOP, PHONE, PipePage, pipe_browser  # noqa: E402

MOVE_JS = """async ([id, key, props]) => {
  // Move one control; time until the first of the figure's sources or readouts changed
  // (data), until the last of them changed (done: once Python said it was idle again),
  // and until the frame after that was painted. Changes are seen as the page's Bokeh
  // document applies them (its change events), not by polling.
  const fig = window.__guide.figs.get(id);
  const models = [fig.liveRoot, ...fig.liveRoot.references()];
  let ctl = models.find(m => (m.css_classes || []).includes(`ctl-${key}`));
  if (!Object.keys(props).every(a => a in ctl.properties))
    ctl = [...ctl.references()].find(r => Object.keys(props).every(a => a in r.properties)) || ctl;
  const shown = new Set(models.filter(m => (m.name || '').startsWith(`src-${id}-`) ||
                                           (m.css_classes || []).some(c => c.startsWith('out-'))));
  let tData = null, tDone = null, tPaint = null;
  const onChange = (e) => {      // (not the plots' own changes as they lay out and draw)
    if (!shown.has(e.model)) return;
    const t = tDone = performance.now();
    if (tData === null) tData = t;
    requestAnimationFrame(() => requestAnimationFrame(() => { if (tDone === t) tPaint = performance.now(); }));
  };
  // a move may reach Python as more than one patch (changes made while Python was busy
  // wait for it): done when Python said "idle" after each
  const worker = window.__guide.worker;
  let sent = 0, idles = 0;
  const onMessage = (e) => { if (e.data.type === 'idle') idles += 1; };
  worker.postMessage = function (msg, ...rest) {
    if (msg && msg.type === 'patch') sent += 1;
    return Worker.prototype.postMessage.call(this, msg, ...rest);
  };
  fig.doc.on_change(onChange, false);
  worker.addEventListener('message', onMessage);
  const t0 = performance.now();
  try {
    for (const [attr, value] of Object.entries(props)) ctl[attr] = value;
    while (!(sent > 0 && idles >= sent && tData !== null)) {
      await new Promise(r => setTimeout(r, 0));        // the patch before "idle" is applied by now
      if (performance.now() - t0 > 10000) return {timeout: true};
    }
  } finally {
    fig.doc.remove_on_change(onChange);
    worker.removeEventListener('message', onMessage);
    delete worker.postMessage;                         // the prototype's again
  }
  while (tPaint === null) await new Promise(r => requestAnimationFrame(r));
  return {data_ms: tData - t0, done_ms: tDone - t0, paint_ms: tPaint - t0};
}"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs: list[float], unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    xs = [x * scale for x in xs if x is not None]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.{digits}f}{unit} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def load_once(ctx, base: str, page_file: str, figure_ids: list[str], counters: dict, moves: int,
              query: str = "", settle: bool = False) -> dict:
    counters.clear()
    page = ctx.new_page()
    # the pipe page is not inspected while it loads: it reports afterwards (page.log below)
    log = None if isinstance(page, PipePage) else attach(page, base)
    t0 = time.perf_counter()
    page.goto(base + page_file + query)
    states = wait_states(page, figure_ids, timeout_s=240)
    wall = time.perf_counter() - t0
    timing = page.evaluate("window.__guide.timing")
    res = {
        "states": states,
        "wall_s": wall,
        "boot": page.evaluate("window.__guide.boot || null"),
        "poster_ms": timing.get(f"poster:{figure_ids[0]}"),
        "preview_ms": timing.get(f"preview:{figure_ids[0]}"),
        "live_ms": max(timing.get(f"live:{f}", 0) for f in figure_ids),
        "fcp_ms": page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"),
        "bytes": sum(v[1] for v in counters.values()),
        "requests": sum(v[0] for v in counters.values()),
    }
    if moves:
        res["moves"] = move_controls(page, figure_ids, moves)
    res["stored_s"] = wait_snapshot_stored(page) if res["boot"] and res["boot"].get("path") == "snapshot" else None
    if settle:
        wait_offline_saved(page)
    log = log or page.log(base)     # a pipe page: its main thread only (tests/pipe_browser.py)
    res["errors"], res["off_site"] = log.errors(), log.off_site()
    page.close()
    return res


STORED_JS = """async () => {
  const id = window.__guide.runtime.snapshot && window.__guide.runtime.snapshot.id;
  if (!id || !(await caches.has(`guide-snapshot-${id}`))) return false;
  return (await (await caches.open(`guide-snapshot-${id}`)).keys()).length === 2;
}"""


def wait_snapshot_stored(page, timeout_s: float = 30) -> float | None:
    """Seconds until the worker has kept the snapshot in Cache Storage (None: not within timeout_s)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if page.evaluate(STORED_JS):
            return time.perf_counter() - t0
        page.wait_for_timeout(100)
    return None


def wait_offline_saved(page, timeout_s: float = 120) -> None:
    """Wait until the page has saved the offline copy (or failed to) and, a copy just saved,
    has run the worker's big module from it once (static/offline.js: data-compiled)."""
    deadline = time.monotonic() + timeout_s
    while page.evaluate("document.documentElement.dataset.offline") not in ("ready", "failed") \
            and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    while page.evaluate("document.documentElement.dataset.compiled") == "running" and time.monotonic() < deadline:
        page.wait_for_timeout(100)


def move_controls(page, figure_ids: list[str], n: int) -> list[dict]:
    """Move controls n times in all, the page's figures taking turns (each figure's first
    slider, else its first menu or button group, cycling through its options), and time
    each redraw. A page with two or three figures spreads the moves over all of them."""
    import panel as pn

    import widgets
    from bokeh.document import Document

    plans = []
    for fid in figure_ids:
        view = widgets.build(fid)
        sliders = [(k, w) for k, w in view.controls.items()
                   if isinstance(w, (pn.widgets.IntSlider, pn.widgets.FloatSlider))]
        menus = [(k, w) for k, w in view.controls.items()      # menus and button groups
                 if isinstance(w, (pn.widgets.Select, pn.widgets.RadioBoxGroup, pn.widgets.RadioButtonGroup))]
        if sliders or menus:
            plans.append((fid, view, *(sliders or menus)[0], bool(sliders)))
    if not plans:
        raise ValueError(f"{figure_ids}: no slider, menu or button group to move")
    turns = []                                   # (move, plan, value): the figures take turns
    firsts = {}
    for j, (fid, view, key, widget, slider) in enumerate(plans):
        m = n // len(plans) + (1 if j < n % len(plans) else 0)
        if slider:
            lo, hi = widget.start, widget.end
            values = [type(widget.value)(lo + (hi - lo) * ((i * 7) % m + 1) / (m + 1)) for i in range(m)]
        else:
            opts = list(widget.options.values()) if isinstance(widget.options, dict) else list(widget.options)
            values = [opts[(opts.index(widget.value) + 1 + i) % len(opts)] for i in range(m)]
        turns += [(i, j, v) for i, v in enumerate(values)]
        firsts[j] = values[0] if values else None
    turns.sort(key=lambda t: (t[0], t[1]))
    roots = {fid: view.layout.get_root(Document()) for fid, view, *_ in plans}
    out = []
    for i, j, v in turns:
        figure_id, view, key, widget, slider = plans[j]
        shown = lambda: json.dumps(collect(roots[figure_id], figure_id), sort_keys=True, default=str)   # noqa: E731
        if v == widget.value:
            v = firsts[j] if firsts[j] != widget.value else (type(widget.value)(widget.end) if slider else v)
        if v == widget.value:
            continue
        before, last = shown(), widget.value
        widget.value = v
        if shown() == before:        # an option that shows the same as the last one: nothing to time
            continue
        r = page.evaluate(MOVE_JS, [figure_id, key, control_patch(figure_id, key, v, start=last)])
        r["control"] = f"{figure_id}.{key}"
        out.append(r)
    return out


WAYS = {"snapshot": "", "normal": "?boot=normal"}
ALL_WAYS = ("snapshot", "normal", "bare")

BARE_HTML = """<!doctype html><meta charset="utf-8"><title>bare Pyodide + numpy</title>
<p id="status">loading</p>
<script>
window.__timing = {};
const w = new Worker("bare-worker.js", { type: "module" });
w.onmessage = (e) => { window.__timing.ready = performance.now(); document.getElementById("status").textContent = e.data; };
</script>
"""
BARE_WORKER = """import { loadPyodide } from "./%(module)s";
const py = await loadPyodide({ indexURL: new URL("./%(pyodide)s", import.meta.url).href,
                               lockFileURL: new URL("./%(lock)s", import.meta.url).href, fullStdLib: false });
await py.loadPackage(["numpy"]);
py.runPython("import numpy; numpy.arange(10).sum()");
postMessage("ready");
"""


def bare_site(site: Path, work: Path) -> Path:
    """A folder serving the bare boot page next to the site's own vendor/ (a link)."""
    from builder import pages as builder_pages

    cfg = builder_pages.worker_config()
    root = work / "bare"
    root.mkdir()
    (root / "vendor").symlink_to((site / "vendor").resolve(), target_is_directory=True)
    (root / "bare.html").write_text(BARE_HTML)
    (root / "bare-worker.js").write_text(BARE_WORKER % cfg)
    return root


def bare_once(ctx, base: str, counters: dict) -> dict:
    counters.clear()
    page = ctx.new_page()
    page.goto(base + "bare.html")
    ready = "document.getElementById('status').textContent === 'ready'"
    page.wait_for_function(ready, timeout=240000, polling=50)
    res = {"live_ms": page.evaluate("window.__timing.ready"), "bytes": sum(v[1] for v in counters.values())}
    page.close()
    return res


def bench_site(site: Path, pages: list[tuple[str, list[str]]], runs: int, moves: int,
               driver: str = "pipe", device=DESKTOP, ways: tuple = ALL_WAYS) -> list[dict]:
    """Every page, each of `ways` (default all), cold then warm, alternating the order of
    the ways each run. `driver` "pipe" loads the pages in a browser with no inspector
    attached to them (tests/pipe_browser.py), "playwright" through Playwright."""
    from playwright.sync_api import sync_playwright

    def browser(p, profile):
        return pipe_browser(profile, device=device) if driver == "pipe" else chromium_context(p, profile)

    results = []
    counters: dict = {}
    work = Path(tempfile.mkdtemp(prefix="guide-bench-"))
    all_pages = {c.file: c.figures for c in read_chapters() if c.figures}
    try:
        bare_root = bare_site(site, work)
        with serving(site, counters=counters) as base, serving(bare_root, counters=counters) as bare_base, \
                sync_playwright() as p:
            for page_file, figure_ids in pages:
                order = list(all_pages)                   # the next chapter with figures, in reading order
                nxt = order[(order.index(page_file) + 1) % len(order)]
                row = {"page": page_file, "figures": figure_ids, "next": nxt,
                       **{w: {"cold": [], "warm": [], "next": []} for w in ALL_WAYS}}
                for i in range(runs):
                    for way in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
                        profile = work / f"profile-{way}-{i}"
                        with browser(p, profile) as ctx:
                            if way == "bare":
                                row[way]["cold"].append(bare_once(ctx, bare_base, counters))
                            else:
                                row[way]["cold"].append(load_once(ctx, base, page_file, figure_ids, counters, moves,
                                                                  WAYS[way], settle=True))
                        with browser(p, profile) as ctx:
                            if way == "bare":
                                row[way]["warm"].append(bare_once(ctx, bare_base, counters))
                            else:
                                row[way]["warm"].append(load_once(ctx, base, page_file, figure_ids, counters,
                                                                  moves, WAYS[way]))
                                if i == 0:
                                    row[way]["next"].append(load_once(ctx, base, nxt, all_pages[nxt], counters, 0,
                                                                      WAYS[way]))
                        shutil.rmtree(profile, ignore_errors=True)
                        c, w = row[way]["cold"][-1], row[way]["warm"][-1]
                        took = "" if way == "bare" else \
                            f"  (booted: {(c.get('boot') or {}).get('path')}; warm restore steps ms: " \
                            f"{(w.get('boot') or {}).get('steps', '-')})"
                        print(f"  {page_file} run {i + 1} {way:8s} cold {c['live_ms'] / 1e3:.2f} s  "
                              f"warm {w['live_ms'] / 1e3:.2f} s{took}", flush=True)
                results.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: list[dict]) -> bool:
    """The markdown table (seconds to every figure live, medians (min-max)), then any failure."""
    ok = True
    print("\n| page | figures | snapshot cold s | normal cold s | bare cold s | snapshot warm s | normal warm s | "
          "bare warm s | first visit MB snapshot / normal | next chapter MB snapshot / normal | "
          "redraw ms p50 / p95, data (done): first visit; warm | poster s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    live = lambda rs: summary([x["live_ms"] for x in rs], "", 1e-3) if rs else "-"   # noqa: E731
    mb = lambda rs: summary([x["bytes"] for x in rs], "", 1e-6, 2) if rs else "-"   # noqa: E731
    for r in results:
        def redraw(runs):
            moves = [m for x in runs for m in x.get("moves", []) if not m.get("timeout")]
            if not moves:
                return "-"
            data, done = [m["data_ms"] for m in moves], [m["done_ms"] for m in moves]
            return f"{pct(data, .5):.0f} / {pct(data, .95):.0f} (done {pct(done, .5):.0f} / {pct(done, .95):.0f})"
        print(f"| {r['page']} | {len(r['figures'])} | {live(r['snapshot']['cold'])} | {live(r['normal']['cold'])} | "
              f"{live(r['bare']['cold'])} | {live(r['snapshot']['warm'])} | {live(r['normal']['warm'])} | "
              f"{live(r['bare']['warm'])} | {mb(r['snapshot']['cold'])} / {mb(r['normal']['cold'])} | "
              f"{mb(r['snapshot']['next'])} / {mb(r['normal']['next'])} (to {r['next']}) | "
              f"{redraw(r['snapshot']['cold'])}; {redraw(r['snapshot']['warm'])} | "
              f"{summary([x['poster_ms'] for x in r['snapshot']['cold']], '', 1e-3) if r['snapshot']['cold'] else '-'} |")
        for way, want in (("snapshot", "snapshot"), ("normal", "normal")):
            for x in r[way]["cold"] + r[way]["warm"] + r[way]["next"]:
                bad = {f: s for f, s in x["states"].items() if s != "live"}
                took = (x.get("boot") or {}).get("path")
                if bad or x["errors"] or x["off_site"] or took != want or \
                        any(m.get("timeout") for m in x.get("moves", [])):
                    ok = False
                    print(f"  FAILED {way} run: states {bad}, booted {x.get('boot')}, errors {x['errors'][:3]}, "
                          f"off-site {x['off_site'][:3]}")
            stored = [x["stored_s"] for x in r[way]["cold"] if way == "snapshot"]
            if any(s is None for s in stored):
                print(f"  note: {r['page']}: the snapshot was not kept in Cache Storage within 30 s in "
                      f"{stored.count(None)} of {len(stored)} cold runs")
    return ok


# ----------------------------------------------------------------------------- reference proof


def bench_proof(proof: Path, runs: int, warm_runs: int) -> list[dict]:
    """Build the reference proof in a temporary copy and time its worker page to 'ready'."""
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="guide-proof-"))
    shutil.copytree(proof, work / "proof")
    cache = work / "proof" / "cache"
    cache.mkdir(exist_ok=True)
    for name in (f"pyodide-{PYODIDE_VERSION}.tgz", WASM_CARRIER_FILE):
        if (CACHE / name).exists():
            shutil.copy(CACHE / name, cache / name)
    subprocess.run([sys.executable, str(work / "proof" / "build.py"), "--python", sys.executable],
                   cwd=work / "proof", check=True, stdout=subprocess.DEVNULL)
    site = work / "proof" / "site"
    out = []
    counters: dict = {}
    ready = "document.getElementById('status') && document.getElementById('status').textContent === 'ready'"
    with serving(site, counters=counters) as base, sync_playwright() as p:
        for kind, n in (("cold", runs), ("warm", warm_runs)):
            profile = Path(tempfile.mkdtemp(prefix="guide-proof-prof-"))
            try:
                if kind == "warm":
                    with chromium_context(p, profile) as ctx:
                        pg = ctx.new_page()
                        pg.goto(base + "worker.html")
                        pg.wait_for_function(ready, timeout=240000)
                        pg.close()
                for _ in range(n):
                    with chromium_context(p, profile if kind == "warm" else None) as ctx:
                        counters.clear()
                        pg = ctx.new_page()
                        t0 = time.perf_counter()
                        pg.goto(base + "worker.html")
                        pg.wait_for_function(ready, timeout=240000, polling=50)
                        t = pg.evaluate("window.__timing.rendered")   # ms after navigation start
                        out.append({"kind": kind, "live_ms": t, "wall_s": time.perf_counter() - t0,
                                    "bytes": sum(v[1] for v in counters.values())})
                        pg.close()
            finally:
                shutil.rmtree(profile, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "_site")
    ap.add_argument("--pages", nargs="*", help="page files (default: every chapter page with figures)")
    ap.add_argument("--runs", type=int, default=3, help="runs per page and way (each: cold, then warm)")
    ap.add_argument("--moves", type=int, default=20, help="control moves per cold run")
    ap.add_argument("--proof", type=Path, help="the reference proof folder (runtime-proof) to time as well")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--driver", choices=("pipe", "playwright"), default="pipe",
                    help="pipe (default): pages load with no inspector attached, as in a reader's browser "
                         "(tests/pipe_browser.py); playwright: through Playwright, which inspects the "
                         "page's workers and slows their start")
    ap.add_argument("--mobile", action="store_true",
                    help="a phone: 390 x 844 px at 3x, CPU throttled 4x through the DevTools protocol, touch "
                         "events (tests/pipe_browser.py PHONE; with the pipe driver only)")
    ap.add_argument("--ways", default=",".join(ALL_WAYS),
                    help="which ways to start Python to time, comma-separated (default: all three; "
                         "snapshot alone times the pages as built, a third of the time)")
    a = ap.parse_args()
    if a.mobile and a.driver != "pipe":
        ap.error("--mobile needs the pipe driver")
    ways = tuple(w for w in a.ways.split(",") if w)
    if not ways or set(ways) - set(ALL_WAYS):
        ap.error(f"--ways takes some of {', '.join(ALL_WAYS)}, got {a.ways!r}")
    chapters = read_chapters()
    pages = [(c.file, c.figures) for c in chapters if c.figures and (not a.pages or c.file in a.pages)]
    device = PHONE if a.mobile else DESKTOP
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; site {a.site}; "
          f"driver {a.driver}; device {device}", flush=True)
    results = bench_site(a.site, pages, a.runs, a.moves, a.driver, device, ways)
    ok = report(results)
    raw = {"pages": results}
    if a.proof:
        proof = bench_proof(a.proof, a.runs, a.runs)
        raw["proof"] = proof
        for kind in ("cold", "warm"):
            xs = [x for x in proof if x["kind"] == kind]
            if xs:
                print(f"reference proof worker.html {kind}: {summary([x['live_ms'] for x in xs], ' s', 1e-3)}, "
                      f"{summary([x['bytes'] for x in xs], ' MB', 1e-6, 1)} (measured after the pages, not alternated)")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if a.json:
        a.json.write_text(json.dumps(raw, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
