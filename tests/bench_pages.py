#!/usr/bin/env python3
"""Benchmark the chapter pages in headless Chromium and print the figures.

    ./dev bench                                   # every chapter page with figures
    ./dev bench --pages ch04-batching.html --runs 5
    ./dev bench --proof ../shared/runtime-proof   # also the reference proof, same run

For each page, over several runs (median and min-max), on a fresh browser profile
("cold") and then on a profile that has visited the page before ("warm"):
- poster painted: the build-time poster of the first figure painted (ms after navigation);
- preview painted: the pre-rendered Bokeh document painted (BokehJS parsed);
- live: every figure of the page live (Python loaded, figures built and swapped in);
- redraw: a control moved 20 times; time until the figure's data changed (data) and
  until the next frame after it was painted (painted), p50 and p95;
- bytes: what the server sent for the page load (compressed as served), and requests.
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
from tests.figures import control_patch  # noqa: E402

MOVE_JS = """async ([id, key, props]) => {
  // Move one control; time until any of the figure's sources or readouts changed, and
  // until the frame after that was painted.
  const fig = window.__guide.figs.get(id);
  const models = [fig.liveRoot, ...fig.liveRoot.references()];
  let ctl = models.find(m => (m.css_classes || []).includes(`ctl-${key}`));
  if (!Object.keys(props).every(a => a in ctl.properties))
    ctl = [...ctl.references()].find(r => Object.keys(props).every(a => a in r.properties)) || ctl;
  const shown = models.filter(m => (m.name || '').startsWith(`src-${id}-`) ||
                                   (m.css_classes || []).some(c => c.startsWith('out-')));
  const snapshot = () => shown.map(m => 'data' in m.properties ? m.data : m.text);
  const before = snapshot();
  const t0 = performance.now();
  for (const [attr, value] of Object.entries(props)) ctl[attr] = value;
  while (snapshot().every((v, i) => v === before[i])) {
    await new Promise(r => setTimeout(r, 1));
    if (performance.now() - t0 > 10000) return {timeout: true};
  }
  const tData = performance.now();
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return {data_ms: tData - t0, paint_ms: performance.now() - t0};
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


def load_once(ctx, base: str, page_file: str, figure_ids: list[str], counters: dict, moves: int) -> dict:
    counters.clear()
    page = ctx.new_page()
    log = attach(page, base)
    t0 = time.perf_counter()
    page.goto(base + page_file)
    states = wait_states(page, figure_ids, timeout_s=240)
    wall = time.perf_counter() - t0
    timing = page.evaluate("window.__guide.timing")
    res = {
        "states": states,
        "wall_s": wall,
        "poster_ms": timing.get(f"poster:{figure_ids[0]}"),
        "preview_ms": timing.get(f"preview:{figure_ids[0]}"),
        "live_ms": max(timing.get(f"live:{f}", 0) for f in figure_ids),
        "fcp_ms": page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"),
        "bytes": sum(v[1] for v in counters.values()),
        "requests": sum(v[0] for v in counters.values()),
        "errors": log.errors(),
        "off_site": log.off_site(),
    }
    if moves:
        res["moves"] = move_controls(page, figure_ids, moves)
    page.close()
    return res


def move_controls(page, figure_ids: list[str], n: int) -> list[dict]:
    """Move a control n times (the first slider of the page's figures, else the first
    menu or button group, cycling through its options); time each redraw."""
    import panel as pn

    import widgets
    views = [(fid, widgets.build(fid)) for fid in figure_ids]
    sliders = [(fid, k, w) for fid, v in views for k, w in v.controls.items()
               if isinstance(w, (pn.widgets.IntSlider, pn.widgets.FloatSlider))]
    menus = [(fid, k, w) for fid, v in views for k, w in v.controls.items()      # menus and button groups
             if isinstance(w, (pn.widgets.Select, pn.widgets.RadioBoxGroup, pn.widgets.RadioButtonGroup))]
    if not sliders and not menus:
        raise ValueError(f"{figure_ids}: no slider, menu or button group to move")
    figure_id, key, widget = (sliders or menus)[0]
    if sliders:
        lo, hi = widget.start, widget.end
        values = [type(widget.value)(lo + (hi - lo) * ((i * 7) % n + 1) / (n + 1)) for i in range(n)]
    else:
        opts = list(widget.options.values()) if isinstance(widget.options, dict) else list(widget.options)
        values = [opts[(opts.index(widget.value) + 1 + i) % len(opts)] for i in range(n)]
    out = []
    for v in values:
        if v == widget.value:
            v = values[0] if values[0] != widget.value else (type(widget.value)(widget.end) if sliders else v)
        if v == widget.value:
            continue
        r = page.evaluate(MOVE_JS, [figure_id, key, control_patch(figure_id, key, v)])
        r["control"] = f"{figure_id}.{key}"
        out.append(r)
        widget.value = v
    return out


def bench_site(site: Path, pages: list[tuple[str, list[str]]], runs: int, warm_runs: int, moves: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    results = []
    counters: dict = {}
    with serving(site, counters=counters) as base, sync_playwright() as p:
        for page_file, figure_ids in pages:
            cold, warm = [], []
            for i in range(runs):
                with chromium_context(p) as ctx:
                    cold.append(load_once(ctx, base, page_file, figure_ids, counters, moves))
                print(f"  {page_file} cold {i + 1}: live at {cold[-1]['live_ms'] / 1e3:.2f} s", flush=True)
            profile = Path(tempfile.mkdtemp(prefix="guide-bench-"))
            try:
                with chromium_context(p, profile) as ctx:        # the first visit fills the cache
                    load_once(ctx, base, page_file, figure_ids, counters, 0)
                for i in range(warm_runs):
                    with chromium_context(p, profile) as ctx:
                        warm.append(load_once(ctx, base, page_file, figure_ids, counters, 0))
                    print(f"  {page_file} warm {i + 1}: live at {warm[-1]['live_ms'] / 1e3:.2f} s", flush=True)
            finally:
                shutil.rmtree(profile, ignore_errors=True)
            results.append({"page": page_file, "figures": figure_ids, "cold": cold, "warm": warm})
    return results


def report(results: list[dict]) -> bool:
    ok = True
    print("\n| page | cache | runs | poster painted s | preview painted s | live s | redraw data ms p50/p95 | "
          "redraw painted ms p50/p95 | MB sent | requests |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for kind in ("cold", "warm"):
            rs = r[kind]
            if not rs:
                continue
            moves = [m for x in rs for m in x.get("moves", []) if not m.get("timeout")]
            data = [m["data_ms"] for m in moves]
            paint = [m["paint_ms"] for m in moves]
            redraw = f"{pct(data, .5):.0f} / {pct(data, .95):.0f}" if data else "-"
            redraw_p = f"{pct(paint, .5):.0f} / {pct(paint, .95):.0f}" if paint else "-"
            print(f"| {r['page']} | {kind} | {len(rs)} | {summary([x['poster_ms'] for x in rs], '', 1e-3)} | "
                  f"{summary([x['preview_ms'] for x in rs], '', 1e-3)} | {summary([x['live_ms'] for x in rs], '', 1e-3)} | "
                  f"{redraw} | {redraw_p} | {summary([x['bytes'] for x in rs], '', 1e-6, 1)} | "
                  f"{summary([x['requests'] for x in rs], '', 1, 0)} |")
            for x in rs:
                bad = {f: s for f, s in x["states"].items() if s != "live"}
                if bad or x["errors"] or x["off_site"] or any(m.get("timeout") for m in x.get("moves", [])):
                    ok = False
                    print(f"  FAILED run: states {bad}, errors {x['errors'][:3]}, off-site {x['off_site'][:3]}")
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
    ap.add_argument("--runs", type=int, default=3, help="cold runs per page")
    ap.add_argument("--warm-runs", type=int, default=3, help="warm runs per page")
    ap.add_argument("--moves", type=int, default=20, help="control moves per cold run")
    ap.add_argument("--proof", type=Path, help="the reference proof folder (runtime-proof) to time as well")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    a = ap.parse_args()
    chapters = read_chapters()
    pages = [(c.file, c.figures) for c in chapters if c.figures and (not a.pages or c.file in a.pages)]
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; site {a.site}", flush=True)
    results = bench_site(a.site, pages, a.runs, a.warm_runs, a.moves)
    ok = report(results)
    raw = {"pages": results}
    if a.proof:
        proof = bench_proof(a.proof, a.runs, a.warm_runs)
        raw["proof"] = proof
        for kind in ("cold", "warm"):
            xs = [x for x in proof if x["kind"] == kind]
            if xs:
                print(f"| reference proof worker.html | {kind} | {len(xs)} | - | - | "
                      f"{summary([x['live_ms'] for x in xs], '', 1e-3)} | - | - | "
                      f"{summary([x['bytes'] for x in xs], '', 1e-6, 1)} | - |")
    if a.json:
        a.json.write_text(json.dumps(raw, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
