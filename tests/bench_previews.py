#!/usr/bin/env python3
"""Time the page's main thread drawing a chapter's figure previews, with no Python at all,
for variants of the figures' pre-rendered documents (what the figures are made of).

    .venv/bin/python tests/bench_previews.py --pages ch04-batching.html ch09-speculative.html \\
        --variant as-built --variant no-toolbars --runs 8

On a later visit to a page with two or three figures, the page's main thread, not Python,
decides when the last figure is live: BokehJS draws each figure's preview (the build's
Bokeh document, which Python then adopts), and that takes longer than the worker takes to
restore Python. This benchmark isolates that part. It serves a copy of each page whose
Python worker is never started (the page's loader reports it as failed; the previews are
drawn all the same) and whose offline copy is not saved, with each figure's pre-rendered
document changed as a variant says:

- as-built: unchanged;
- no-toolbars: no plot shows its toolbar (`toolbar_location` null);
- first-toolbar-only: only the first plot of each figure's document shows its toolbar (an
  upper bound for what one toolbar shared by a figure's plots would save);
- save-only: each toolbar keeps its save and hover tools only;
- no-legends: no legends;
- plain-glyphs: no renderer has a selected, unselected or muted look, as
  `widgets.base.plain_glyphs` builds them now (on a site built before it: what it saves).

The variants other than as-built and plain-glyphs change what a reader would see; they measure what a part
costs, they are not proposals. Page loads alternate between the variants (the order flips
every run) in a browser with no inspector attached (tests/pipe_browser.py), on one profile
that has loaded the page twice first, so BokehJS comes from the HTTP cache with the code
Chrome kept for it (pages as built get it from the offline copy, compiled whole: see
docs/offline-reading.md). Per page and variant, medians (min-max) of:
- BokehJS loaded: ms after navigation;
- previews drawn: ms from BokehJS loaded until the last figure's preview was painted;
- main-thread CPU: CPU time of the page's main thread (Linux /proc) from navigation until
  then, ms (steadier than the wall clock on a shared machine).
It prints numbers and exits 0 unless a page fails to draw its previews.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.serve import serving  # noqa: E402
from tests.bench_cpu import browser_cpu  # noqa: E402
from tests.pipe_browser import pipe_browser  # noqa: E402

WORKER = 'new Worker("static/worker.js", { type: "module" })'
NO_WORKER = '(() => { throw new Error("bench_previews: no Python") })()'
OFFLINE = '<script src="static/offline.js" defer></script>'
PRERENDER = re.compile(r'(<script type="application/json" class="fig-prerender">)(.*?)(</script>)', re.S)
PANELS = ("above", "below", "left", "right", "center")


def _objects(node):
    """Every Bokeh model object ({"type": "object", ...}) in a document's JSON."""
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for v in node.values():
            yield from _objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _objects(v)


def _no_toolbars(doc: dict, keep_first: bool = False) -> None:
    for i, m in enumerate(o for o in _objects(doc) if o.get("name") == "Figure"):
        if not (keep_first and i == 0):
            m.setdefault("attributes", {})["toolbar_location"] = None


def _save_only(doc: dict) -> None:
    for m in _objects(doc):
        if m.get("name") == "Toolbar":
            a = m.setdefault("attributes", {})
            a["tools"] = [t for t in a.get("tools", []) if t.get("name") in ("SaveTool", "HoverTool")]


def legend_ids(doc: dict) -> set:
    """The ids of a document's Legends (a legend is written out in full where it is first
    referred to, as in a plot's side panel or a callback's arguments, and by id elsewhere)."""
    return {o["id"] for o in _objects(doc) if o.get("name") == "Legend"}


def _no_legends(doc: dict) -> None:
    ids = legend_ids(doc)
    for m in _objects(doc):
        if m.get("name") == "Figure":
            a = m.get("attributes", {})
            for side in PANELS:
                if isinstance(a.get(side), list):
                    a[side] = [r for r in a[side] if not (isinstance(r, dict) and r.get("id") in ids)]


def _plain_glyphs(doc: dict) -> None:
    from widgets.base import UNUSED_GLYPHS

    for m in _objects(doc):
        if m.get("name") == "GlyphRenderer":
            m.setdefault("attributes", {}).update(dict.fromkeys(UNUSED_GLYPHS))


VARIANTS = {
    "as-built": lambda doc: None,
    "plain-glyphs": _plain_glyphs,
    "no-toolbars": _no_toolbars,
    "first-toolbar-only": lambda doc: _no_toolbars(doc, keep_first=True),
    "save-only": _save_only,
    "no-legends": _no_legends,
}


def variant_page(html: str, variant: str) -> str:
    """The page's HTML with no Python worker, no offline copy, and each figure's
    pre-rendered document changed by `variant`."""
    if WORKER not in html or OFFLINE not in html:
        raise SystemExit("bench_previews: the page no longer starts its worker or offline.js as this "
                         "script expects (update WORKER / OFFLINE)")
    html = html.replace(WORKER, NO_WORKER).replace(OFFLINE, "")

    def change(m: re.Match) -> str:
        data = json.loads(m.group(2))
        VARIANTS[variant](data["docs_json"])
        return m.group(1) + json.dumps(data, separators=(",", ":")).replace("</", "<\\/") + m.group(3)

    return PRERENDER.sub(change, html)


def variant_site(site: Path, work: Path, pages: list[str], variants: list[str]) -> None:
    """Into the folder `work`: the site's vendor/ and static/ (links), and for each page and
    variant the page as `variant_page` makes it, named VARIANT--PAGE."""
    for name in ("vendor", "static"):
        (work / name).symlink_to((site / name).resolve(), target_is_directory=True)
    for page in pages:
        html = (site / page).read_text()
        for v in variants:
            (work / f"{v}--{page}").write_text(variant_page(html, v))


DRAWN_JS = """(() => { const G = window.__guide, t = G && G.timing;
  return t && G.figures.every((id) => t['preview:' + id]) ? t : null; })()"""


def load(browser, profile: Path, url: str) -> dict:
    page = browser.new_page()
    time.sleep(0.3)                       # the browser's own start settles
    before = browser_cpu(profile)["main"]
    page.goto(url)
    t = page.wait_for(DRAWN_JS, timeout_s=60, poll_ms=20)
    cpu = browser_cpu(profile)["main"] - before
    page.close()
    last = max(v for k, v in t.items() if k.startswith("preview:"))
    return {"bokeh": t["bokeh"], "drawn": last - t["bokeh"], "cpu": cpu * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "_site")
    ap.add_argument("--pages", nargs="+", default=["ch04-batching.html", "ch09-speculative.html"])
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                    help="a variant to time (repeat it; default: as-built and no-toolbars)")
    ap.add_argument("--runs", type=int, default=8)
    a = ap.parse_args()
    variants = a.variant or ["as-built", "no-toolbars"]
    if not (a.site / "MANIFEST.json").is_file():
        ap.error(f"{a.site} is not a built site (no MANIFEST.json): run ./dev build")
    work = Path(tempfile.mkdtemp(prefix="guide-previews-"))
    res: dict = {}
    try:
        variant_site(a.site, work, a.pages, variants)
        with serving(work) as base:
            for page in a.pages:
                profile = Path(tempfile.mkdtemp(prefix="guide-previews-profile-"))
                try:
                    with pipe_browser(profile) as b:
                        for _ in range(2):                       # the HTTP cache and Chrome's code cache
                            load(b, profile, f"{base}{variants[0]}--{page}")
                    for i in range(a.runs):
                        for v in (variants if i % 2 == 0 else variants[::-1]):
                            with pipe_browser(profile) as b:
                                res.setdefault((page, v), []).append(load(b, profile, f"{base}{v}--{page}"))
                finally:
                    shutil.rmtree(profile, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def cell(rs: list, key: str) -> str:
        xs = [r[key] for r in rs]
        return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"

    print(f"\n{a.runs} loads per page and variant, alternating; ms, median (min-max)\n")
    print("| page | variant | BokehJS loaded | previews drawn | main-thread CPU |")
    print("|---|---|---:|---:|---:|")
    for (page, v), rs in res.items():
        print(f"| {page} | {v} | {cell(rs, 'bokeh')} | {cell(rs, 'drawn')} | {cell(rs, 'cpu')} |")
    return 0


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
