"""Bytes transferred: a first visit to a chapter, the offline copy saved after it, and each
further chapter, with the server sending brotli where it has a .br copy and with gzip only.

    .venv/bin/python tests/bench_offline.py [--site _site] [--first ch04-batching.html]
                                            [--further ch05-latency.html,ch06-kv-cache.html] [--by-file N]

Counts what the local server sent (bodies, compressed as sent), in headless Chromium on a
fresh profile per variant. "page" is the first visit until every figure is live; "offline
copy" what the service worker then fetched to save the whole guide (most of the runtime is
already in the HTTP cache and only revalidated); "further" each next chapter until live.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder import serve  # noqa: E402
from builder.serve import serving  # noqa: E402
from tests.browser import chromium_context, wait_states  # noqa: E402


def run(site: Path, first: str, further: list[str], encodings) -> tuple[dict, dict]:
    """(bytes sent per row, {url: [requests, bytes]} of the first page until its figures are live)"""
    from playwright.sync_api import sync_playwright

    figures = {c["file"]: c["figures"] for c in json.loads((site / "chapters.json").read_text())}
    counters: dict = {}
    serve.ENCODINGS = encodings
    out = {}
    sent = lambda: sum(v[1] for v in counters.values())
    with serving(site, counters=counters) as base, sync_playwright() as p, chromium_context(p) as ctx:
        page = ctx.new_page()
        page.goto(base + first)
        wait_states(page, figures[first], timeout_s=300)
        out["page"] = sent()
        by_file = {k: list(v) for k, v in counters.items()}
        page.wait_for_function("document.documentElement.dataset.offline === 'ready'", timeout=300000, polling=200)
        out["offline copy"] = sent() - out["page"]
        page.close()
        for name in further:
            before = sent()
            page = ctx.new_page()
            page.goto(base + name)
            wait_states(page, figures[name], timeout_s=300)
            out[f"further: {name}"] = sent() - before
            page.close()
    return out, by_file


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "_site")
    ap.add_argument("--first", default="ch04-batching.html")
    ap.add_argument("--further", default="ch05-latency.html,ch06-kv-cache.html")
    ap.add_argument("--by-file", type=int, default=0, metavar="N",
                    help="also list the first page's N largest transfers")
    args = ap.parse_args()
    further = [f for f in args.further.split(",") if f]
    variants = {"brotli + gzip": (("br", ".br"), ("gzip", ".gz")), "gzip only": (("gzip", ".gz"),)}
    runs = {name: run(args.site.resolve(), args.first, further, enc) for name, enc in variants.items()}
    results = {name: sums for name, (sums, _) in runs.items()}
    rows = list(next(iter(results.values())))
    print(f"| bytes sent (MB) | {' | '.join(results)} |")
    print(f"|---|{'---:|' * len(results)}")
    for row in rows:
        print(f"| {row} | {' | '.join(f'{r[row] / 1e6:.2f}' for r in results.values())} |")
    total = {n: r["page"] + r["offline copy"] for n, r in results.items()}
    print(f"| first visit incl. offline copy | {' | '.join(f'{t / 1e6:.2f}' for t in total.values())} |")
    if args.by_file:
        name, (_, by_file) = next(iter(runs.items()))
        print(f"\nthe page's largest transfers ({name}), MB:")
        for url, v in sorted(by_file.items(), key=lambda kv: -kv[1][1])[:args.by_file]:
            print(f"  {v[1] / 1e6:7.3f}  {url}")
    return 0


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
