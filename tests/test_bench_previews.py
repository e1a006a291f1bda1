"""tests/bench_previews.py: its variants change the figures' pre-rendered documents as it
says, its pages start no Python, and it times a page's previews."""
from __future__ import annotations

import json
import shutil

import pytest

from builder.serve import serving
from tests import bench_previews as bp
from tests.pipe_browser import pipe_browser

PAGE = "ch04-batching.html"


def docs(html: str) -> list[dict]:
    return [json.loads(m.group(2))["docs_json"] for m in bp.PRERENDER.finditer(html)]


def figures(doc: dict) -> list[dict]:
    return [o for o in bp._objects(doc) if o.get("name") == "Figure"]


def legends(doc: dict) -> int:
    ids = bp.legend_ids(doc)
    return sum(1 for f in figures(doc) for side in bp.PANELS for r in f.get("attributes", {}).get(side, [])
               if isinstance(r, dict) and r.get("id") in ids)


def test_each_variant_changes_only_what_it_names(site_dir):
    html = (site_dir / PAGE).read_text()
    built = docs(html)
    assert len(built) == 2 and all(len(figures(d)) == 3 for d in built)   # ch04: two figures of three plots
    assert all(legends(d) == 2 for d in built)
    tools = lambda d: sorted(t["name"] for o in bp._objects(d) if o.get("name") == "Toolbar"  # noqa: E731
                             for t in o["attributes"]["tools"])

    as_built = bp.variant_page(html, "as-built")
    assert bp.WORKER not in as_built and bp.NO_WORKER in as_built and bp.OFFLINE not in as_built
    assert docs(as_built) == built

    for doc in docs(bp.variant_page(html, "no-toolbars")):
        assert [f["attributes"]["toolbar_location"] for f in figures(doc)] == [None, None, None]
    for doc, orig in zip(docs(bp.variant_page(html, "first-toolbar-only")), built):
        locations = [f["attributes"].get("toolbar_location", "above") for f in figures(doc)]
        assert locations == [figures(orig)[0]["attributes"].get("toolbar_location", "above"), None, None]
    for doc, orig in zip(docs(bp.variant_page(html, "no-legends")), built):
        assert legends(doc) == 0 and tools(doc) == tools(orig)
    for doc, orig in zip(docs(bp.variant_page(html, "save-only")), built):
        assert set(tools(doc)) <= {"SaveTool", "HoverTool"} and tools(doc).count("SaveTool") == 3
        assert "PanTool" in tools(orig) and legends(doc) == legends(orig)


def test_a_page_it_cannot_change_is_refused(site_dir):
    html = (site_dir / PAGE).read_text().replace(bp.WORKER, 'new Worker("elsewhere.js")')
    with pytest.raises(SystemExit, match="update WORKER"):
        bp.variant_page(html, "as-built")


TOOLBARS_JS = """(() => { let n = 0; const walk = (root) => { for (const el of root.querySelectorAll('*')) {
  if (el.classList.contains('bk-Toolbar')) n++; if (el.shadowRoot) walk(el.shadowRoot); } }; walk(document); return n; })()"""


def test_it_times_the_previews_of_a_page_with_no_python(site_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    bp.variant_site(site_dir, root, [PAGE], ["as-built", "no-toolbars"])
    profile = tmp_path / "profile"
    seen = {}
    with serving(root) as base, pipe_browser(profile) as b:
        r = bp.load(b, profile, f"{base}no-toolbars--{PAGE}")
        for v in ("as-built", "no-toolbars"):
            page = b.new_page()
            page.goto(f"{base}{v}--{PAGE}")
            page.wait_for(bp.DRAWN_JS, timeout_s=60)
            # no Python: the figures say so and the previews stand
            states = page.evaluate("[...document.querySelectorAll('[data-figure]')].map((f) => f.dataset.state)")
            seen[v] = (states, page.evaluate(TOOLBARS_JS))
            page.close()
    shutil.rmtree(profile, ignore_errors=True)
    assert seen == {"as-built": (["error", "error"], 6), "no-toolbars": (["error", "error"], 0)}
    assert 0 < r["bokeh"] and 0 < r["drawn"] < 60000 and r["cpu"] > 0
