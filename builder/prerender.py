"""Step 3: every figure the pages place, built in CPython at build time: its Bokeh
document (embedded in the page, so the controls work before Python loads in the browser)
and its SVG poster (builder.posters, painted with the page's first paint)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from builder.common import PANEL_CDN_ROOT, BuildError, log
from builder.runtime import Runtime

@dataclass
class Prerendered:
    """A figure's build-time rendering: poster HTML and its Bokeh document as JSON."""

    id: str
    title: str
    poster: str
    prerender: str          # JSON for <script type="application/json">, "</" escaped
    height: int


def prerender_figures(figure_ids: list[str], runtime: Runtime) -> dict[str, Prerendered]:
    """Step 3: build each figure in CPython; keep its poster and its Bokeh document."""
    os.environ["PANEL_CDN_ROOT"] = PANEL_CDN_ROOT          # Panel's stylesheets from the site
    import panel  # noqa: F401  (after PANEL_CDN_ROOT is set)
    from bokeh.document import Document
    from bokeh.embed.util import standalone_docs_json_and_render_items

    import widgets
    from builder.posters import poster_html

    if panel.__version__ != runtime.versions["panel"]:
        raise BuildError(f"the build runs Panel {panel.__version__} but the browser gets "
                         f"{runtime.versions['panel']}: install the pinned versions (./dev build does)")
    out = {}
    for fid in figure_ids:
        try:
            view = widgets.build(fid)
            doc = Document()
            view.layout.server_doc(doc, location=False)
            docs_json, render_items = standalone_docs_json_and_render_items(doc.roots, suppress_callback_warning=True)
        except Exception as exc:
            raise BuildError(f"figure {fid} failed to build in CPython: {type(exc).__name__}: {exc}") from exc
        (doc_json,) = docs_json.values()
        docid = f"prerender-{fid}"
        root_id = doc.roots[0].id
        data = {"docs_json": {docid: doc_json},
                "render_items": [{"docid": docid, "roots": {}, "root_ids": [root_id]}],
                "root_id": root_id}
        text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # key order matters to BokehJS
        height = max([getattr(p, "height", 0) or 0 for p in view.plots] + [300]) + 60
        out[fid] = Prerendered(fid, widgets.module(fid).TITLE, poster_html(view), text, height)
        log(f"widgets.{fid}", f"pre-rendered ({len(text) // 1024} KiB document)")
    return out
