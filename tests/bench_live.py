#!/usr/bin/env python3
"""Time the figures going live after Python is ready, for two or more builds of the site,
alternating page loads between them in one run (timings on a shared machine drift).

    .venv/bin/python tests/bench_live.py --variant new=_site --variant old=/tmp/old/_site \\
        --pages ch04-batching.html ch09-speculative.html --runs 5

Per page and variant, cold (fresh browser profile) and warm (a profile that has loaded
the page once, until the worker had kept the memory snapshot in Cache Storage and the
offline copy was saved, as a reader's first visit leaves it): medians (min-max) of
- ready: Python loaded in the worker and about to build the figures (ms after navigation);
- first: the first figure live;  live: every figure live;
- after ready: live - ready, the part spent building the figures and handing them to the page;
- handover: live - the moment Python had built the last figure (its "built" message, or the
  whole document sent, "python_rendered", in builds before figures were adopted): what the
  page spends making the figures live once Python has built them.
With --moves N, each warm load then moves controls N times (as `tests/bench_pages.py`
does: the figures take turns, each its first slider, else its first menu) and the table adds the
redraw, ms until the figure's data first changed, p50 / p95 over every warm load's moves.
The timed loads run in a browser with no inspector attached (tests/pipe_browser.py), as in a
reader's; a variant written NAME=SITE_DIR,playwright loads through Playwright instead, which
inspects the page's workers (the same site twice, once each way, measures what that costs).
It prints numbers and exits 0 unless a load fails (a figure not live, a page error, or a
warm load that restored the snapshot from the network rather than from Cache Storage).
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.pages import read_chapters  # noqa: E402
from builder.serve import serving  # noqa: E402
from tests.bench_cpu import first_visit  # noqa: E402
from tests.bench_pages import move_controls, pct  # noqa: E402
from tests.browser import attach, chromium_context, wait_states  # noqa: E402
from tests.pipe_browser import PipePage, pipe_browser  # noqa: E402


def load(ctx, url: str, figure_ids: list[str], moves: int = 0) -> dict:
    page = ctx.new_page()
    base = url.rsplit("/", 1)[0] + "/"
    log = None if isinstance(page, PipePage) else attach(page, base)   # a pipe page reports afterwards
    page.goto(url)
    states = wait_states(page, figure_ids, timeout_s=240)
    t = page.evaluate("window.__guide.timing")
    boot = page.evaluate("window.__guide.boot || null") or {}
    moved = move_controls(page, figure_ids, moves) if moves and all(s == "live" for s in states.values()) else []
    errors = (log or page.log(base)).errors()
    page.close()
    lives = [t.get(f"live:{f}") for f in figure_ids]
    ok = all(s == "live" for s in states.values()) and all(lives) and not errors
    ready = t.get("stage:figures:0")
    built = [v for k, v in t.items() if k.startswith("built:")] or [t.get("python_rendered")]
    return {"ok": ok, "states": states, "errors": errors, "ready": ready,
            "boot": {k: boot.get(k) for k in ("path", "reason")},
            "built": max(b for b in built if b is not None) if any(b is not None for b in built) else None,
            "first": min(lives) if all(lives) else None, "live": max(lives) if all(lives) else None,
            "redraw": [m["data_ms"] for m in moved if not m.get("timeout")], "timeouts": sum(1 for m in moved if m.get("timeout"))}


def redraws(rs: list) -> str:
    xs = [x for r in rs for x in r["redraw"]]
    return f" {pct(xs, 0.5):.0f} / {pct(xs, 0.95):.0f} ({len(xs)}) |" if xs else " n/a |"


def med(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs) / 1e3:.2f} ({min(xs) / 1e3:.2f}-{max(xs) / 1e3:.2f})" if xs else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME=SITE_DIR, or NAME=SITE_DIR,playwright (two or more)")
    ap.add_argument("--pages", nargs="+", required=True, help="chapter page files")
    ap.add_argument("--runs", type=int, default=3, help="cold and warm loads per page and variant")
    ap.add_argument("--moves", type=int, default=0, help="control moves timed after each warm load")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    variants, drivers = [], {}
    for v in a.variant:
        name, spec = v.split("=", 1)
        site, _, drivers[name] = spec.partition(",")
        if drivers[name] not in ("", "pipe", "playwright"):
            ap.error(f"--variant {v}: the driver is pipe (the default) or playwright")
        variants.append((name, Path(site)))

    @contextlib.contextmanager
    def browser(p, name, profile):
        """A browser of the variant's driver on `profile` (None: a fresh one, removed after)."""
        if drivers[name] == "playwright":
            with chromium_context(p, profile) as ctx:
                yield ctx
            return
        fresh = None if profile else Path(tempfile.mkdtemp(prefix="guide-live-cold-"))
        try:
            with pipe_browser(profile or fresh) as ctx:
                yield ctx
        finally:
            if fresh:
                shutil.rmtree(fresh, ignore_errors=True)
    figures = {c.file: c.figures for c in read_chapters()}
    res: dict = {}
    ok = True
    with sync_playwright() as p:
        servers = [serving(site) for _, site in variants]
        bases = [s.__enter__() for s in servers]
        profiles: dict = {}
        made: list[Path] = []
        try:
            for page_file in a.pages:
                for (name, _), base in zip(variants, bases):       # warm profiles: one visit each
                    profiles[name] = Path(tempfile.mkdtemp(prefix="guide-live-"))
                    made.append(profiles[name])
                    with chromium_context(p, profiles[name]) as ctx:
                        first_visit(ctx, base + page_file, figures[page_file])
                for i in range(a.runs):
                    for kind in ("cold", "warm"):
                        order = list(zip(variants, bases))
                        if i % 2:
                            order.reverse()
                        for (name, _), base in order:
                            with browser(p, name, profiles[name] if kind == "warm" else None) as ctx:
                                r = load(ctx, base + page_file, figures[page_file],
                                         moves=a.moves if kind == "warm" else 0)
                            res.setdefault((page_file, kind, name), []).append(r)
                            if kind == "warm" and r["ok"] and r["boot"] == {"path": "snapshot", "reason": "network"}:
                                r["ok"] = False
                                r["errors"] = ["restored the snapshot from the network, not from the one kept in Cache Storage"]
                            if not r["ok"] or r["timeouts"]:
                                ok = False
                                print(f"  FAILED {page_file} {kind} {name}: {r['states']} {r['errors'][:3]}"
                                      + (f", {r['timeouts']} moves timed out" if r['timeouts'] else ""))
                            print(f"  {page_file} {kind} {name} {i + 1}: ready {r['ready'] / 1e3:.2f} s, "
                                  f"live {r['live'] / 1e3:.2f} s" if r["ok"] else "", flush=True)
        finally:
            for s in servers:
                s.__exit__(None, None, None)
            for prof in made:
                shutil.rmtree(prof, ignore_errors=True)
    print("\n| page | cache | variant | runs | ready s | first live s | every figure live s | after ready s | handover s |"
          + (" redraw p50 / p95 ms (moves) |" if a.moves else ""))
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if a.moves else ""))
    for (page_file, kind, name), rs in sorted(res.items(), key=lambda kv: (a.pages.index(kv[0][0]), kv[0][1])):
        rs = [r for r in rs if r["ok"]]
        print(f"| {page_file} | {kind} | {name} | {len(rs)} | {med([r['ready'] for r in rs])} | "
              f"{med([r['first'] for r in rs])} | {med([r['live'] for r in rs])} | "
              f"{med([r['live'] - r['ready'] for r in rs])} | "
              f"{med([r['live'] - r['built'] for r in rs if r['built'] is not None])} |"
              + (redraws(rs) if a.moves else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
