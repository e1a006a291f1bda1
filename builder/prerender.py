"""Step 3: every figure the pages place, built in CPython at build time: its Bokeh
document (embedded in the page, so the controls work before Python loads in the browser)
and its SVG poster (builder.posters, painted with the page's first paint)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from builder.common import PANEL_CDN_ROOT, BuildError, Runtime, log

@dataclass
class Prerendered:
    """A figure's build-time rendering: poster HTML and its Bokeh document as JSON."""

    id: str
    title: str
    poster: str
    prerender: str          # JSON for <script type="application/json">, "</" escaped
    height: int
    controls: str = "{}"    # its controls as links carry them (url_controls), JSON, "</" escaped
    readouts: str = ""      # the keys of the readouts its text alternative reads, in order


def described_readouts(view) -> list[str]:
    """The readouts a figure's text alternative reads out (static/guide.js describeFigure):
    all but its notes on where the numbers come from, which a screen reader can read under
    the figure and which would make every change a long announcement."""
    return [k for k in view.readouts if k != "note" and not k.endswith("_note")]


def url_token(value) -> str:
    """How a choice's value is written in a link: true/false for booleans, else str(value)
    (the string Panel gives a Select's option values in the page)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def url_controls(view) -> dict[str, dict]:
    """What the page needs to read and write a figure's controls in a link (static/state.js):
    key -> {"kind": "number", start, end, step, integer} for sliders and steppers (checked
    again against the live Bokeh model), {"kind": "bool"} for checkboxes and toggles,
    {"kind": "choice", "tokens": [...]} for menus and button groups (one token per option,
    in order), each with its default. Buttons hold no state and are left out."""
    import panel as pn

    out: dict[str, dict] = {}
    for key, w in view.controls.items():
        where = f"figure {view.figure_id}, control {key!r} ({type(w).__name__})"
        if isinstance(w, pn.widgets.Button):
            continue
        if hasattr(w, "options"):
            opts = list(w.options.values()) if isinstance(w.options, dict) else list(w.options)
            tokens = [url_token(o) for o in opts]
            if len(set(tokens)) != len(tokens):
                raise BuildError(f"{where}: two options are written the same way in a link: {tokens}")
            out[key] = {"kind": "choice", "tokens": tokens, "default": url_token(w.value)}
        elif isinstance(w.value, bool):
            out[key] = {"kind": "bool", "default": w.value}
        elif isinstance(w.value, (int, float)) and hasattr(w, "start") and hasattr(w, "end"):
            integer = isinstance(w.value, int)
            out[key] = {"kind": "number", "default": w.value, "start": w.start, "end": w.end,
                        "step": getattr(w, "step", None) or 1, "integer": integer}
        else:
            raise BuildError(f"{where}: no rule to write this control in a link (static/state.js)")
    return out


def prerender_figures(figure_ids: list[str], runtime: Runtime) -> dict[str, Prerendered]:
    """Step 3: build each figure in CPython; keep its poster and its Bokeh document."""
    os.environ["PANEL_CDN_ROOT"] = PANEL_CDN_ROOT          # Panel's stylesheets from the site
    import panel  # noqa: F401  (after PANEL_CDN_ROOT is set)
    from bokeh.document import Document
    from bokeh.embed.util import standalone_docs_json_and_render_items

    import widgets
    from builder.posters import poster_html
    from widgets.runtime import build_document, fingerprint

    if panel.__version__ != runtime.versions["panel"]:
        raise BuildError(f"the build runs Panel {panel.__version__} but the browser gets "
                         f"{runtime.versions['panel']}: install the pinned versions (./dev build does)")
    # As in the page's worker (widgets/runtime.py PageSession): no hidden BrowserInfo root,
    # and the same model ids, so the page can adopt this document as the live one.
    panel.config.browser_info = False
    out = {}
    for fid in figure_ids:
        try:
            doc = Document()
            view, root = build_document(fid, doc)
            docs_json, render_items = standalone_docs_json_and_render_items([root], suppress_callback_warning=True)
        except Exception as exc:
            raise BuildError(f"figure {fid} failed to build in CPython: {type(exc).__name__}: {exc}") from exc
        (doc_json,) = docs_json.values()
        docid = f"prerender-{fid}"
        root_id = root.id
        data = {"docs_json": {docid: doc_json},
                "render_items": [{"docid": docid, "roots": {}, "root_ids": [root_id]}],
                "root_id": root_id, "fingerprint": fingerprint(root)}
        text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # key order matters to BokehJS
        height = max([getattr(p, "height", 0) or 0 for p in view.plots] + [300]) + 60
        controls = json.dumps(url_controls(view), separators=(",", ":")).replace("</", "<\\/")
        out[fid] = Prerendered(fid, widgets.module(fid).TITLE, poster_html(view), text, height, controls,
                               " ".join(described_readouts(view)))
        log(f"widgets.{fid}", f"pre-rendered ({len(text) // 1024} KiB document)")
    return out
