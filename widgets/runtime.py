"""The Python half of a chapter page in the browser (runs in the page's Web Worker).

One PageSession per page, one Bokeh document per figure. The page shows each figure's
build-time document (the preview, builder/prerender.py) before Python has loaded; the
worker builds the same figure with the same model ids (`stable_ids`), so the page can
adopt the preview as the live figure when the two match (`fingerprint`) instead of
rendering a second document. Where they do not match, `render` serialises the figure's
document for the page to embed. Then the page and the session exchange Bokeh JSON patches
(encoded as Panel's worker protocol does, panel.io.pyodide); everything one change from
the page causes goes back as one patch, once Python has handled that change.
A figure whose build fails is reported by id with its error; the others still go live.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import sys
import traceback

import widgets

PANEL_HELPER_ROOTS = ("notifications", "browser_info")
ID_BASE = 10_000_000      # a figure's model ids: p<ID_BASE + its index * ID_SPAN + n>
ID_SPAN = 100_000


def _error_text(exc: BaseException) -> str:
    """The exception and the last frames of its traceback, for the figure's error box."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4)
    return "".join(frames).strip()


@contextlib.contextmanager
def stable_ids(figure_id: str):
    """Bokeh models made inside get the ids `p<n>` counting from a base fixed by the
    figure's place in widgets.FIGURES, whatever was made before in the process: the
    build (CPython) and the page's worker (Pyodide) give the figure the same ids.
    The figure's module is imported first, so its import-time models stay outside."""
    import bokeh.util.serialization as serialization
    from bokeh.settings import settings

    widgets.module(figure_id)
    index = list(widgets.FIGURES).index(figure_id)
    simple, counter = settings.simple_ids(), serialization._simple_id
    settings.simple_ids.set_value(True)
    serialization._simple_id = ID_BASE + index * ID_SPAN
    try:
        yield
    finally:
        if serialization._simple_id >= ID_BASE + (index + 1) * ID_SPAN:
            raise RuntimeError(f"figure {figure_id} made more than {ID_SPAN} Bokeh models")
        serialization._simple_id = counter
        settings.simple_ids.set_value(simple)


def fingerprint(root) -> str:
    """A short hash of every model under `root`: its id and type. Two documents with the
    same fingerprint have the same models under the same ids (built by the same code)."""
    lines = sorted(f"{m.id} {m.__qualified_model__}" for m in root.references())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


_CSS_URL = re.compile(r"""url\(\s*(['"]?)([^'")]+)\1\s*\)""")
_DATA_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".gif": "image/gif", ".woff2": "font/woff2"}


def panel_css_file(url: str):
    """The file in the installed Panel behind stylesheet URL `url` (one under Panel's dist
    folder as Panel writes it, `<cdn root><version>/dist/...`), or None."""
    from pathlib import Path

    import panel
    from panel.io.resources import CDN_DIST

    path = url.split("?", 1)[0]
    if not path.startswith(CDN_DIST):
        return None
    rel = path[len(CDN_DIST):]
    package = Path(panel.__file__).parent
    # Panel serves its themes' CSS (panel/theme/css) under dist/bundled/theme/
    candidate = (package / "theme" / "css" / rel.removeprefix("bundled/theme/") if rel.startswith("bundled/theme/")
                 else package / "dist" / rel)
    return candidate if candidate.is_file() else None


def css_with_data_urls(css_file) -> str:
    """The text of `css_file` with every relative url() in it replaced by that file as a data
    URL: CSS put into a page (or a data URL of its own) has no folder to resolve them from."""
    def data_url(match) -> str:
        target = match.group(2)
        if target.startswith(("data:", "#")):
            return match.group(0)
        file = (css_file.parent / target).resolve()
        kind = _DATA_TYPES.get(file.suffix)
        if kind is None or not file.is_file():
            raise ValueError(f"{css_file.name}: url({target}) is not a file that can be inlined")
        return f'url("data:{kind};base64,{base64.b64encode(file.read_bytes()).decode()}")'

    return _CSS_URL.sub(data_url, css_file.read_text(encoding="utf-8"))


def inline_panel_stylesheets(doc, figure_id: str) -> None:
    """Panel's own stylesheets in `doc`, as CSS text in the document instead of links.

    Panel gives each of its models links to CSS files (its theme, its widgets' look), so
    BokehJS puts a <link> into each model's shadow root: about 100 on a two-figure page,
    each a request the page makes while its main thread is busiest, and each file's rules
    apply only once it has arrived. Here each such file becomes one InlineStyleSheet per
    document, its relative url()s made data URLs, and the document is registered with
    Panel, so that models Panel adds later get the same ones. Their ids are named,
    `css-<figure>-<n>` in the sorted order of the files, not counted: where else the figure
    is built, a model more may have been made before them (in the snapshot's build, after
    every other figure), and the page adopts its preview only when every model has the same
    id in both. A link to anything but Panel's files is left as it is."""
    from bokeh.core.has_props import HasProps
    from bokeh.models import ImportedStyleSheet, InlineStyleSheet, UIElement
    from panel.io.state import state

    def key(url: str) -> str:       # Panel's key for a stylesheet: its URL without the query
        return url.split("?", 1)[0]

    elements = {m for root in doc.roots for m in root.select({"type": UIElement})}
    files = {key(s.url): panel_css_file(s.url) for m in elements for s in m.stylesheets
             if isinstance(s, ImportedStyleSheet)}
    inline = {}                     # key -> its InlineStyleSheet
    for n, path in enumerate(sorted(p for p, file in files.items() if file is not None)):
        # made with its id as Bokeh's deserializer makes a model it reads from JSON
        inline[path] = sheet = InlineStyleSheet.__new__(InlineStyleSheet, id=f"css-{figure_id}-{n}")
        HasProps.__init__(sheet, css=css_with_data_urls(files[path]))
    for model in elements:
        sheets = [inline.get(key(s.url), s) if isinstance(s, ImportedStyleSheet) else s
                  for s in model.stylesheets]
        if sheets != list(model.stylesheets):
            model.stylesheets = sheets
    state._inline_stylesheets[doc] = inline


def build_document(figure_id: str, doc) -> object:
    """Build figure `figure_id` into Bokeh document `doc` (ids from `stable_ids`) and return
    its root; Panel's invisible helper roots, if any, are not counted."""
    with stable_ids(figure_id):
        view = widgets.build(figure_id)
        before = {r.id for r in doc.roots}
        view.layout.server_doc(doc, location=False)
        inline_panel_stylesheets(doc, figure_id)
    new = [r for r in doc.roots if r.id not in before and r.name not in PANEL_HELPER_ROOTS]
    if len(new) != 1:
        raise RuntimeError(f"figure {figure_id} added {len(new)} roots to the document, expected 1")
    return view, new[0]


# figure id -> (its document, root, fingerprint, FigureView), built ahead by `prebuild` for a
# PageSession.build to take as they are (each once)
_PREBUILT: dict = {}


def prebuild(figure_ids) -> None:
    """Build figures `figure_ids` now, each for one later PageSession.build. The site's
    build runs this in Pyodide before it makes the memory snapshot (builder/snapshot.mjs),
    so a page restored from it only links its figures: building one in the browser takes
    about a second. A page that boots Python normally builds its figures itself."""
    session = PageSession()
    for figure_id in figure_ids:
        built = json.loads(session.build(figure_id))
        if "error" in built:
            raise RuntimeError(f"figure {figure_id} failed to build:\n{built['error']}")
        _PREBUILT[figure_id] = (session.docs[figure_id], session.roots[figure_id], built["fingerprint"],
                                session.views[figure_id])
    # The quantization figure keeps its demo matrix for its next moves: in a snapshot that is
    # half a MB more to send on a first visit, so a page makes it again on its first move.
    from sim import quant
    quant.forget_demo_weights()


def open_session(panel_cdn_root: str) -> "PageSession":
    """The page's session, made once Python is up (static/worker.js): Panel takes its
    stylesheets from the site (`panel_cdn_root`, relative to the site's root) rather than
    a CDN, and finds JS null where Panel 1.10 expects it (Pyodide >= 0.28 has
    pyodide.ffi.jsnull; in 0.27 JS null is None already)."""
    import os

    import pyodide.ffi

    if not hasattr(pyodide.ffi, "jsnull"):
        pyodide.ffi.jsnull = type("JsNullSentinel", (), {})()
    os.environ["PANEL_CDN_ROOT"] = panel_cdn_root
    return PageSession()


def after_restore() -> str:
    """The first call into Python restored from the build's memory snapshot
    (static/worker.js): point the zip importers at the zip on disk now
    (`refresh_zip_importers`), and say what the snapshot held ready, JSON: the figures
    built (`prebuild`), how many objects Python's garbage collector leaves alone (frozen),
    and how many zip importers were pointed at the new zip."""
    import gc

    refreshed = refresh_zip_importers()
    return json.dumps({"prebuilt": sorted(_PREBUILT), "frozen": gc.get_freeze_count(),
                       "zip_importers": refreshed})


def refresh_zip_importers() -> int:
    """importlib.invalidate_caches(), reading each zip's directory once; the number of zip
    importers, each now holding the directory of its zip as it is on disk.

    A memory snapshot keeps the directory of the standard library's zip that was installed
    when it was made; the page installs a smaller one (builder/snapshot.py stdlib_zip), whose
    members lie at other offsets, so the importers must read it again. But Python 3.12's
    zipimporter.invalidate_caches() reads its zip's directory itself, and a package imported
    from a zip has an importer of its own: the page's invalidate_caches() read the same zip 22
    times, 0.23-0.34 s of a warm page load on 2 cores, where one read takes 20-45 ms. While
    it runs here, zipimport's reader returns what it read for an archive the first time."""
    import importlib
    import zipimport

    # (a zipimport without _read_directory raises here, and the page boots normally instead)
    read = zipimport._read_directory
    directories: dict = {}

    def read_once(archive):
        if archive not in directories:
            directories[archive] = read(archive)
        return directories[archive]

    zipimport._read_directory = read_once
    try:
        importlib.invalidate_caches()
    finally:
        zipimport._read_directory = read
    return sum(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())


class PageSession:
    """The figures of one page, each live in a Bokeh document of its own."""

    def __init__(self):
        import panel as pn

        # No hidden BrowserInfo root per figure: the page renders exactly the figure roots
        # (the build's preview is made with the same setting).
        pn.config.browser_info = False
        # Models made after the build (a figure that adds one while live) get globally
        # unique ids, as in Panel's own worker documents (panel.io.pyodide.init_doc).
        from bokeh.settings import settings
        settings.simple_ids.set_value(False)
        # Panel counts every change it handles in pn.state.busy (for a loading indicator,
        # which the guide does not show); that bookkeeping was about a fifth of Python's time
        # per control move in Pyodide.
        from panel.io.state import state
        state._add_busy_event = state._remove_busy_event = lambda event_id: None
        self.docs: dict = {}                # figure id -> its Bokeh document
        self.views: dict = {}               # figure id -> its FigureView (controls, sources, readouts)
        self.roots: dict = {}               # figure id -> its root model
        self.senders: dict = {}             # figure id -> send_patch, once linked
        self.held: dict = {}                # figure id -> its changes not yet sent
        self.shown: dict = {}               # figure id -> {source id: the columns the page has}
        self.applying = False               # inside _from_page: changes wait for its end
        self.away: dict = {}                # figure id -> a rehearsal's (controls, their values, first
                                            # old values): between rehearse_move and rehearse_back

    def build(self, figure_id: str) -> str:
        """Build one figure (or take it from `prebuild`); JSON {"figure", "fingerprint"}
        or {"figure", "error"}."""
        from bokeh.document import Document
        from panel.io.document import MockSessionContext
        from panel.io.state import set_curdoc, state

        if figure_id in _PREBUILT:
            self.docs[figure_id], self.roots[figure_id], made, self.views[figure_id] = _PREBUILT.pop(figure_id)
            return json.dumps({"figure": figure_id, "fingerprint": made})
        try:
            doc = Document()
            doc.hold()
            doc._session_context = lambda: MockSessionContext(document=doc)
            state.curdoc = doc
            with set_curdoc(doc):
                view, root = build_document(figure_id, doc)
            # As panel.io.pyodide.write_doc does: without a session, Panel applies each change
            # at once instead of scheduling it on a server event loop that does not exist here.
            doc._session_context = None
            # The events held while building (the root added, the title) describe what the
            # page has already, as the preview or as the document `render` sends: let them
            # go now, so that linking does not send the whole figure to the page once more.
            # Changes from here on are held until `link`.
            doc.unhold()
            doc.hold()
            # The page has every model already. (Bokeh counts a model as new until a patch or
            # a whole document has carried it; left so, applying each patch from the page
            # copied the set of the figure's models still new, and sending one walked it.)
            doc.models.flush_synced()
            self.docs[figure_id], self.roots[figure_id], self.views[figure_id] = doc, root, view
            return json.dumps({"figure": figure_id, "fingerprint": fingerprint(root)})
        except Exception as exc:   # one broken figure must not take the page down
            return json.dumps({"figure": figure_id, "error": _error_text(exc)})

    def render(self, figure_id: str) -> str:
        """Figure `figure_id`'s document for the page to embed: JSON {docs_json,
        render_items, root_id} (when the page cannot adopt its preview)."""
        from bokeh.embed.util import standalone_docs_json_and_render_items

        root = self.roots[figure_id]
        docs_json, render_items = standalone_docs_json_and_render_items([root], suppress_callback_warning=True)
        return json.dumps({"docs_json": docs_json, "render_items": [item.to_json() for item in render_items],
                           "root_id": root.id})

    def link(self, figure_id: str, send_patch) -> None:
        """Forward every later change of the figure's document to the page as a JSON patch,
        send_patch(patch, buffers, figure_id): the changes a patch from the page causes go
        together when apply_patch ends, any other change at once. (Panel's
        _link_docs_worker sends each change as a patch of its own: one message, and one
        update of the page, per changed property.)"""
        import functools

        from bokeh.events import DocumentReady
        from panel.io.state import set_curdoc, state

        doc = self.docs[figure_id]
        self.senders[figure_id], self.held[figure_id] = send_patch, []

        def hold(event) -> None:
            if getattr(event, "setter", None) == "js":   # the page's own change, applied here
                if getattr(event, "attr", None) == "data":     # (a source edited there: compare with nothing)
                    self.shown.get(figure_id, {}).pop(getattr(event.model, "id", None), None)
                return
            self.held[figure_id].append(event)
            if not self.applying and figure_id not in self.away:
                self.send(figure_id)

        with set_curdoc(doc):
            doc.on_change(hold)
            doc.unhold()
            self.shown[figure_id] = columns_shown(doc)
            doc.on_event("document_ready", functools.partial(state._schedule_on_load, doc))
            doc.callbacks.trigger_event(DocumentReady())

    def send(self, figure_id: str) -> None:
        """Send the figure's held changes to the page as one patch (Panel's encoding)."""
        import js
        import pyodide.ffi
        from panel.io.pyodide import _dict_converter, _process_document_events

        events, self.held[figure_id] = self.held[figure_id], []
        events = self.unshown(figure_id, events)
        if not events:
            return
        patch, buffer_map = _process_document_events(self.docs[figure_id], events)
        patch = pyodide.ffi.to_js(patch, dict_converter=_dict_converter)
        buffers = js.Map.new(js.Object.entries(pyodide.ffi.to_js(buffer_map)))
        self.senders[figure_id](patch, buffers, figure_id)

    def unshown(self, figure_id: str, events: list) -> list:
        """`events` less the data sources set to the columns the page has already.

        A figure's update sets every source it draws, changed or not; inside a document,
        Bokeh sends each such assignment whole (ColumnDataChangedEvent), equal or not, and
        the page redraws what it gets (on ch03-roofline a batch move set ten sources, 21 KB,
        where three had changed). A source set more than once goes once, as its last value."""
        from bokeh.document.events import ColumnDataChangedEvent

        shown = self.shown.get(figure_id, {})
        whole = lambda e: isinstance(e, ColumnDataChangedEvent) and e.cols is None and e.data is None   # noqa: E731
        last = {e.model.id: i for i, e in enumerate(events) if whole(e)}
        out = []
        for i, e in enumerate(events):
            model = getattr(e, "model", None)
            if whole(e):
                if last[model.id] != i or (model.id in shown and _same_columns(model.data, shown[model.id])):
                    continue
                shown[model.id] = _columns(model.data)
            elif getattr(e, "attr", None) == "data":     # columns streamed or patched: no full copy to compare
                shown.pop(getattr(model, "id", None), None)
            out.append(e)
        return out

    @contextlib.contextmanager
    def _from_page(self, doc):
        """Change `doc` as a change from the page does: it is Panel's current document (Panel
        dispatches model updates at once only for the current document, a context variable,
        which calls from JavaScript do not carry over), and the figures' changes are held
        until the end (`applying`), then sent by the caller."""
        from panel.io.state import set_curdoc, state

        self.applying = True
        try:
            state.curdoc = doc
            with set_curdoc(doc):
                yield
        finally:
            self.applying = False

    def apply_patch(self, figure_id: str, patch) -> str | None:
        """Apply a patch from the page (a reader's change), then send what it changed; return
        an error text on failure. A rehearsal of the figure half done (`rehearse_move`)
        is finished first, so the change applies to what the page shows."""
        from panel.io.pyodide import _convert_json_patch

        failure = self.rehearse_back(figure_id)
        try:
            doc = self.docs[figure_id]
            with self._from_page(doc):
                doc.apply_json_patch(_convert_json_patch(patch), setter="js")
        except Exception as exc:
            failure = _failure(figure_id, exc)
        for fid in self.senders:        # what the change did, as one patch per figure
            if fid in self.away:        # (a rehearsal half done: rehearse_back sends)
                continue
            try:
                self.send(fid)
            except Exception as exc:
                failure = failure or _failure(fid, exc)
        return failure

    def rehearsal(self, figure_id: str) -> str:
        """The keys of the figure's controls `rehearse` moves (JSON list): all but buttons."""
        import panel as pn

        view = self.views.get(figure_id)
        return json.dumps([] if view is None else
                          [k for k, w in view.controls.items() if not isinstance(w, pn.widgets.Button)])

    def rehearse(self, figure_id: str, keys: list | None = None) -> str | None:
        """Move controls `keys` of a linked figure (default: every one `rehearsal` lists),
        each to another value and back, the way a reader's change arrives from the page,
        then send the page only what ended up different: nothing, when the figure shows
        what its controls say. Return an error text on failure, as `apply_patch` does.

        The browser compiles the WebAssembly of a Python code path when it first runs, so
        a reader's first move of a control took several times as long as the next ones
        (ch07 in headless Chromium on 2 cores: 50-140 ms against 20-55 ms). Once every
        figure is live the page's worker rehearses one control at a time, in two tasks
        (`rehearse_move`, then `rehearse_back`): a reader's change to another figure waits
        for one of the two at most, one to this figure for the rest of the move and the
        move back (`apply_patch`).
        """
        failure = None
        for key in (json.loads(self.rehearsal(figure_id)) if keys is None else keys):
            failure = self.rehearse_move(figure_id, key) or failure
            failure = self.rehearse_back(figure_id) or failure
        return failure

    def rehearse_move(self, figure_id: str, key: str) -> str | None:
        """The first half of rehearsing control `key` of a linked figure: move it to another
        value, as a reader's change would (`rehearse`). Until `rehearse_back`, the figure's
        changes are held, not sent (the page keeps showing the control where it was); a
        patch from the page for this figure puts the control back first (`apply_patch`)."""
        from widgets.state import other_value

        if figure_id not in self.senders:
            return None
        self.rehearse_back(figure_id)   # (the worker always ends one before it starts another)
        if self.held[figure_id]:         # changes not sent yet go first, as they are
            self.send(figure_id)
        doc = self.docs[figure_id]
        controls = {k: self.views[figure_id].controls[k] for k in json.loads(self.rehearsal(figure_id))}
        first_old: dict = {}            # (model id, property) -> its value before the rehearsal
        notify = doc.callbacks.notify_change

        def noting(model, attr, old, *args, **kwargs):
            first_old.setdefault((model.id, attr), old)
            return notify(model, attr, old, *args, **kwargs)

        self.away[figure_id] = (controls, {k: w.value for k, w in controls.items()}, first_old)
        doc.callbacks.notify_change = noting
        try:
            with self._from_page(doc):
                _set_from_page(doc, controls[key], other_value(controls[key]))
        except Exception as exc:
            return _failure(figure_id, exc)
        return None

    def rehearse_back(self, figure_id: str) -> str | None:
        """The second half (`rehearse_move`): put back every control of the figure that is
        not where it was, with any the move changed, and send the page only what ended up
        different. Nothing to do when no rehearsal of the figure is under way."""
        if figure_id not in self.away:
            return None
        controls, start, first_old = self.away[figure_id]
        doc = self.docs[figure_id]
        failure = None
        try:
            with self._from_page(doc):
                for k, w in controls.items():
                    if w.value != start[k]:
                        _set_from_page(doc, w, start[k])
        except Exception as exc:
            failure = _failure(figure_id, exc)
        finally:
            del doc.callbacks.notify_change
            del self.away[figure_id]
            moved, self.held[figure_id] = self.held[figure_id], [
                e for e in self.held[figure_id] if not _back_as_it_was(e, first_old)]
        try:
            _encode_unsent(doc, moved)
            self.send(figure_id)
        except Exception as exc:
            failure = failure or _failure(figure_id, exc)
        return failure


def _encode_unsent(doc, events: list) -> None:
    """Encode `events` as `send` would, JavaScript objects included, and drop the result:
    the rest of a move's code path, for a rehearsal (the page is not sent it, and no
    model is marked as sent)."""
    from bokeh.core.serialization import Serializer
    from bokeh.document.json import PatchJson

    serializer = Serializer(references=doc.models.synced_references)
    patch = PatchJson(events=serializer.encode(events))
    try:
        import pyodide.ffi
        from panel.io.pyodide import _dict_converter, _serialize_buffers
    except ImportError:         # CPython: no JavaScript objects to make
        return
    buffers = {b.id: pyodide.ffi.to_js(b.to_bytes()).buffer for b in serializer.buffers}
    pyodide.ffi.to_js(_serialize_buffers(patch, buffers=buffers), dict_converter=_dict_converter)


def _set_from_page(doc, widget, value) -> None:
    """Set control `widget` to `value` as a patch from the page would: its Bokeh model's
    properties, as the page's widget writes them."""
    model = next(m for m, _ in widget._models.values() if m.document is doc)
    props = widget._process_param_change({"value": value})
    if "value_throttled" in model.properties():       # a slider sends both as it is let go
        props["value_throttled"] = props["value"]
    doc.apply_json_patch({"events": [{"kind": "ModelChanged", "model": {"id": model.id}, "attr": k, "new": v}
                                     for k, v in props.items()]}, setter="js")


def _back_as_it_was(event, first_old: dict) -> bool:
    """A property change whose value is again the one it had before the first change."""
    from bokeh.document.events import ModelChangedEvent

    if not isinstance(event, ModelChangedEvent) or (event.model.id, event.attr) not in first_old:
        return False
    now = getattr(event.model, event.attr)
    return bool(event.model.lookup(event.attr).property.matches(now, first_old[(event.model.id, event.attr)]))


def columns_shown(doc) -> dict:
    """{source id: a copy of its columns} of every data source in `doc` (what the page shows
    once the figure is linked)."""
    from bokeh.models import ColumnDataSource

    return {m.id: _columns(m.data) for m in doc.models if isinstance(m, ColumnDataSource)}


def _columns(data) -> dict:
    """A copy of a source's columns (a figure may change an array in place before it sets
    the source again)."""
    import copy

    return copy.deepcopy(dict(data))


def _same_columns(new, old) -> bool:
    """Equal columns, as Bokeh compares a source's data outside a document (numpy arrays
    included; anything it cannot compare, a NaN included, counts as changed)."""
    from bokeh.models import ColumnDataSource

    return ColumnDataSource.lookup("data").property.matches(new, old)


def _failure(figure_id: str, exc: BaseException) -> str:
    """A failed change, for the page's error box (JSON {figure, message}) and the console."""
    text = _error_text(exc)
    print(f"figure {figure_id}: {text}", file=sys.stderr)
    return json.dumps({"figure": figure_id, "message": text})
