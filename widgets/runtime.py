"""The Python half of a chapter page in the browser (runs in the page's Web Worker).

One PageSession per page: it builds every figure of the page into one Bokeh document
(one root per figure), serialises it for the page to render, and then exchanges JSON
patches with the page using Panel's own worker protocol (panel.io.pyodide).
A figure whose build fails is reported by id with its error; the others still go live.
"""
from __future__ import annotations

import json
import sys
import traceback

import panel as pn
from bokeh.embed.util import standalone_docs_json_and_render_items
from panel.io.pyodide import _convert_json_patch, _link_docs_worker, init_doc
from panel.io.state import set_curdoc, state

import widgets

PANEL_HELPER_ROOTS = ("notifications", "browser_info")


def _error_text(exc: BaseException) -> str:
    """The exception and the last frames of its traceback, for the figure's error box."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4)
    return "".join(frames).strip()


class PageSession:
    """The figures of one page, live in one Bokeh document."""

    def __init__(self, figure_ids: list[str]):
        # No hidden BrowserInfo root per figure: the page renders exactly the figure roots.
        pn.config.browser_info = False
        init_doc()
        self.doc = state.curdoc
        self.roots: dict[str, str] = {}     # figure id -> Bokeh root model id
        self.errors: dict[str, str] = {}    # figure id -> error text
        for fid in figure_ids:
            try:
                view = widgets.build(fid)
                before = {r.id for r in self.doc.roots}
                view.layout.server_doc(self.doc, location=False)
                # Panel may add invisible helper roots (notifications, browser_info) to the document
                new = [r.id for r in self.doc.roots if r.id not in before and r.name not in PANEL_HELPER_ROOTS]
                if len(new) != 1:
                    raise RuntimeError(f"figure {fid} added {len(new)} roots to the document, expected 1")
                self.roots[fid] = new[0]
            except Exception as exc:   # one broken figure must not take the page down
                self.errors[fid] = _error_text(exc)

    def render(self) -> tuple[str, str, dict[str, str], dict[str, str]]:
        """(docs_json, render_items, {figure id: root id}, {figure id: error}) for the page."""
        if not self.roots:
            return "{}", "[]", {}, self.errors
        roots = [r for r in self.doc.roots if r.id in self.roots.values()]
        docs_json, render_items = standalone_docs_json_and_render_items(roots, suppress_callback_warning=True)
        # As panel.io.pyodide.write_doc does: without a session, Panel applies each change
        # at once instead of scheduling it on a server event loop that does not exist here.
        self.doc._session_context = None
        return (json.dumps(docs_json), json.dumps([item.to_json() for item in render_items]),
                self.roots, self.errors)

    def link(self, send_patch) -> None:
        """Forward every later change of the Python document to the page as a JSON patch."""
        with set_curdoc(self.doc):
            _link_docs_worker(self.doc, send_patch, setter="js")

    def apply_patch(self, patch) -> str | None:
        """Apply a patch from the page (a reader's change); return an error text on failure."""
        try:
            # Panel dispatches model updates at once only for the current document
            # (a context variable, which calls from JavaScript do not carry over).
            with set_curdoc(self.doc):
                self.doc.apply_json_patch(_convert_json_patch(patch), setter="js")
        except Exception as exc:
            text = _error_text(exc)
            fid = next((f for f, mod in widgets.FIGURES.items()
                        if mod.replace(".", "/") + ".py" in text), None)
            print(f"figure {fid or '?'}: {text}", file=sys.stderr)
            return json.dumps({"figure": fid, "message": text})
        return None
