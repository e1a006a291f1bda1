"""How a figure goes live. The page shows each figure's build-time document (the preview);
Python in the worker builds the same figure with the same model ids, and when the two
match (the fingerprint of their models) the page adopts the preview as the live figure
instead of rendering a second document; otherwise it renders Python's document. Either
way the figure ends in the state the reader asked for (a link's values, a control moved
while Python loaded), equal to CPython's."""
from __future__ import annotations

import importlib
import json
import re
import sys
from urllib.parse import urlencode

import pytest

import widgets
from tests.browser import STATE_JS, attach, wait_states
from tests.figures import COLLECT_JS, SET_JS, close, control_patch, cpython_state
from tests.test_site_browser import CHAPTERS, wait_equal
from widgets.state import named_states

PAGE = "ch04-batching.html"
KNEE, SCHED = "ch04-batch-knee", "ch04-scheduler"
needs_ch04 = pytest.mark.skipif(not any(c["file"] == PAGE for c in CHAPTERS), reason="ch04 not in this build")
PRERENDER = re.compile(r'(<figure class="fig" id="fig-([^"]+)".*?<script type="application/json" class="fig-prerender">)(.*?)(</script>)', re.S)


def prerendered(html: str) -> dict[str, dict]:
    """figure id -> its pre-rendered document (the JSON the page embeds as the preview)."""
    return {m.group(2): json.loads(m.group(3)) for m in PRERENDER.finditer(html)}


def test_python_builds_the_previews_models_in_any_order(site_dir):
    """The worker's PageSession builds each figure with the ids and types of the page's
    preview, whatever it built before (figures in another order, figures of other pages)."""
    from bokeh.settings import settings
    import panel as pn

    from widgets.runtime import PageSession

    previews = {}
    for c in CHAPTERS:
        previews.update(prerendered((site_dir / c["file"]).read_text()))
    assert set(previews) == {f for c in CHAPTERS for f in c["figures"]}
    browser_info = pn.config.browser_info
    try:
        session = PageSession()
        for fid in reversed(list(previews)):           # not the build's order
            built = json.loads(session.build(fid))
            assert "error" not in built, built
            assert built["fingerprint"] == previews[fid]["fingerprint"], fid
            assert session.roots[fid].id == previews[fid]["root_id"], fid
            # the page has every model (the preview, or the document `render` sends), so
            # Bokeh counts them all as synced: a patch refers to them by id, and applying
            # or sending one does not walk a set of models still to be sent
            assert session.docs[fid].models.synced_references == set(session.roots[fid].references()), fid
        # a second build of the same figure (another page's worker) gets the same ids again
        again = json.loads(PageSession().build(KNEE))
        assert again["fingerprint"] == previews[KNEE]["fingerprint"]
    finally:
        settings.simple_ids.unset_value()
        pn.config.browser_info = browser_info


def test_previews_carry_panels_stylesheets_as_text(site_dir):
    """No preview links a stylesheet: each of Panel's CSS files is in the document once, as
    text, with the id `css-<figure>-<n>` (the same wherever the figure is built), and with
    nothing in it the page would have to fetch."""
    for c in CHAPTERS:
        for fid, data in prerendered((site_dir / c["file"]).read_text()).items():
            text = json.dumps(data["docs_json"])
            assert '"ImportedStyleSheet"' not in text, fid
            sheets = {m.group(1): json.loads(f'"{m.group(2)}"') for m in re.finditer(
                r'"name": "InlineStyleSheet", "id": "(css-[^"]+)", "attributes": \{"css": "((?:[^"\\]|\\.)*)"', text)}
            assert sorted(sheets) == [f"css-{fid}-{n}" for n in range(len(sheets))] and len(sheets) >= 3, (fid, sorted(sheets))
            for css in sheets.values():
                assert re.findall(r"url\((?!\s*['\"]?data:)", css) == [], fid


def test_panel_css_files_and_their_urls(tmp_path):
    """A stylesheet URL of Panel's maps to the file in the installed package (its themes'
    CSS lives in panel/theme/css); a relative url() in it becomes a data URL of the file."""
    import base64
    from pathlib import Path

    import panel
    from panel.io.resources import CDN_DIST

    from widgets.runtime import css_with_data_urls, panel_css_file

    package = Path(panel.__file__).parent
    assert panel_css_file(f"{CDN_DIST}css/loading.css?v=1") == package / "dist" / "css" / "loading.css"
    assert panel_css_file(f"{CDN_DIST}bundled/theme/default.css") == package / "theme" / "css" / "default.css"
    assert panel_css_file(f"{CDN_DIST}css/no-such.css") is None
    assert panel_css_file("https://example.org/a.css") is None
    (tmp_path / "assets").mkdir()
    (tmp_path / "css").mkdir()
    (tmp_path / "assets" / "dot.svg").write_text("<svg/>")
    sheet = tmp_path / "css" / "a.css"
    sheet.write_text(".a{background:url('../assets/dot.svg')} .b{mask:url(data:image/png;base64,AA==)} .c{filter:url(#f)}")
    assert css_with_data_urls(sheet) == (
        f'.a{{background:url("data:image/svg+xml;base64,{base64.b64encode(b"<svg/>").decode()}")}} '
        ".b{mask:url(data:image/png;base64,AA==)} .c{filter:url(#f)}")
    sheet.write_text(".a{background:url(../assets/gone.svg)}")
    with pytest.raises(ValueError, match="gone.svg"):
        css_with_data_urls(sheet)


def test_models_panel_adds_later_share_the_inline_stylesheets():
    """A widget added to a built figure gets the document's inline stylesheets, not links."""
    import panel as pn
    from bokeh.document import Document
    from bokeh.models import ImportedStyleSheet, InlineStyleSheet

    from widgets.runtime import build_document

    browser_info = pn.config.browser_info
    try:
        pn.config.browser_info = False
        doc = Document()
        view, root = build_document(KNEE, doc)
        ours = {m.id: m for m in root.references() if isinstance(m, InlineStyleSheet) and m.id.startswith("css-")}
        before = {m.id for m in doc.models}
        view.layout.append(pn.widgets.Select(options=["a", "b"]))
        (added,) = [m for m in doc.models if m.id not in before and type(m).__name__ == "CustomSelect"]
        sheets = [s for s in added.stylesheets if not isinstance(s, str)]
        assert not any(isinstance(s, ImportedStyleSheet) for s in sheets)
        assert {s.id for s in sheets} <= set(ours) and all(ours[s.id] is s for s in sheets)
    finally:
        pn.config.browser_info = browser_info


def test_a_prebuilt_figure_is_taken_once_as_it_was_built():
    """The memory snapshot holds every figure built (widgets.runtime.prebuild): a page's
    session takes its figure's document as it is, in the state a build now gives and with
    the same model ids; a second session builds the figure afresh."""
    from bokeh.settings import settings
    import panel as pn

    from tests.figures import collect
    from widgets import runtime

    browser_info = pn.config.browser_info
    try:
        runtime.prebuild([SCHED, KNEE])
        doc, root, _, _ = runtime._PREBUILT[SCHED]
        session = runtime.PageSession()
        taken = json.loads(session.build(SCHED))
        assert session.docs[SCHED] is doc and session.roots[SCHED] is root
        assert SCHED not in runtime._PREBUILT and KNEE in runtime._PREBUILT
        fresh = runtime.PageSession()
        built = json.loads(fresh.build(SCHED))
        assert fresh.docs[SCHED] is not doc
        assert taken == built == {"figure": SCHED, "fingerprint": runtime.fingerprint(fresh.roots[SCHED])}
        assert json.dumps(collect(root, SCHED), sort_keys=True, default=str) == \
            json.dumps(collect(fresh.roots[SCHED], SCHED), sort_keys=True, default=str)
        assert doc.models.synced_references == set(root.references())
    finally:
        runtime._PREBUILT.clear()
        settings.simple_ids.unset_value()
        pn.config.browser_info = browser_info


def _write_zip(path, members: dict) -> None:
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)


def test_zip_importers_read_the_zip_put_in_place_after_a_restore(tmp_path, monkeypatch):
    """A page restored from the memory snapshot installs a smaller standard-library zip than
    the one the snapshot's importers read (builder/snapshot.py stdlib_zip): its members lie
    at other offsets. widgets.runtime.after_restore points every importer of a zip, a
    package's own included, at the zip now on disk, reading it once; left as they were,
    they read the old offsets and fail."""
    import zipimport

    from widgets import runtime

    archive = tmp_path / "lib.zip"
    pad = "# " + "x" * 4000 + "\n"
    _write_zip(archive, {"zpkg/__init__.py": "", "zpkg/gone.py": pad, "zpkg/later.py": "VALUE = 1\n",
                         "zpkg/data.txt": "old"})
    monkeypatch.syspath_prepend(str(archive))
    cached = set(sys.path_importer_cache)
    try:
        importlib.import_module("zpkg.gone")   # in memory, as the snapshot's modules are
        ours = {k: f for k, f in sys.path_importer_cache.items() if isinstance(f, zipimport.zipimporter)
                and f.archive == str(archive)}
        assert len(ours) == 2, ours           # the zip's own importer and the package's
        # the zip replaced as the page replaces the standard library's: the module in memory
        # left out, the others moved
        _write_zip(archive, {"zpkg/__init__.py": "", "zpkg/later.py": "VALUE = 2\n", "zpkg/data.txt": "new"})
        with pytest.raises((zipimport.ZipImportError, EOFError)):   # past the end, or no header there
            importlib.import_module("zpkg.later")
        reads = []
        read = zipimport._read_directory
        monkeypatch.setattr(zipimport, "_read_directory", lambda archive: reads.append(archive) or read(archive))
        held = json.loads(runtime.after_restore())
        assert held["zip_importers"] >= 2 and held["prebuilt"] == sorted(runtime._PREBUILT)
        assert reads.count(str(archive)) == 1 and len(reads) == len(set(reads))   # each zip read once
        assert importlib.import_module("zpkg.later").VALUE == 2
        assert ours[str(archive / "zpkg")].get_data(str(archive / "zpkg" / "data.txt")) == b"new"
        assert all(zipimport._zip_directory_cache[str(archive)] is f._files for f in ours.values())
    finally:
        for name in [m for m in sys.modules if m == "zpkg" or m.startswith("zpkg.")]:
            del sys.modules[name]
        for key in set(sys.path_importer_cache) - cached:
            del sys.path_importer_cache[key]
        zipimport._zip_directory_cache.pop(str(archive), None)


def test_a_source_set_to_what_the_page_has_is_not_sent_again():
    """A figure sets every source it draws on each change; the session sends only those whose
    columns differ from what the page has (ch03-roofline's batch moves one group of points,
    not the roofs or the measured kernels), and the page, applying what was sent, shows
    what Python shows after each move, moves back to an earlier value included."""
    from bokeh.core.serialization import Serializer
    from bokeh.document.events import ColumnDataChangedEvent
    from bokeh.settings import settings
    import panel as pn
    from panel.io.state import set_curdoc, state

    from tests.figures import collect, control_model
    from widgets import runtime

    fid = "ch03-roofline"
    browser_info = pn.config.browser_info
    try:
        python, page = runtime.PageSession(), runtime.PageSession()   # page: the preview's models
        for s in (python, page):
            assert "error" not in json.loads(s.build(fid))
        doc, root = python.docs[fid], python.roots[fid]
        events = []
        doc.on_change(lambda e: events.append(e) if getattr(e, "setter", None) != "js" else None)
        doc.unhold()
        python.shown[fid] = runtime.columns_shown(doc)                 # as link does
        batch = control_model(root, "batch")
        sources = {m.id for m in doc.models if m.name and m.name.startswith(f"src-{fid}-")}
        for value in (8, 512, 8, 8, 1):
            before = collect(root, fid)
            events.clear()
            state.curdoc = doc
            with set_curdoc(doc):
                doc.apply_json_patch({"events": [{"kind": "ModelChanged", "model": {"id": batch.id},
                                                  "attr": "value", "new": value}]}, setter="js")
            after = collect(root, fid)
            kept = python.unshown(fid, list(events))
            set_whole = {e.model.id for e in events if isinstance(e, ColumnDataChangedEvent)}
            sent = {e.model.name[len(f"src-{fid}-"):] for e in kept if isinstance(e, ColumnDataChangedEvent)}
            changed = {k for k in after["sources"] if after["sources"][k] != before["sources"][k]}
            assert sent == changed, (value, sent, changed)
            if before != after:
                assert set_whole >= sources, value                    # the figure set them all
            serializer = Serializer(references=page.docs[fid].models.synced_references)
            page.docs[fid].apply_json_patch({"events": serializer.encode(kept)})
            assert json.dumps(collect(page.roots[fid], fid), sort_keys=True, default=str) == \
                json.dumps(after, sort_keys=True, default=str), value
        # columns that cannot be compared count as changed
        assert runtime._same_columns({"x": [1.0, float("nan")]}, {"x": [1.0, float("nan")]}) is False
    finally:
        settings.simple_ids.unset_value()
        pn.config.browser_info = browser_info


def model_values(doc) -> str:
    """Every property of every model in `doc`, defaults included, as plain JSON (models by
    id, arrays as lists): what the page's copy of the document holds, if it has had every
    change."""
    from bokeh.model import Model

    def plain(v):
        if isinstance(v, Model):
            return {"id": v.id}
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if hasattr(v, "tolist"):             # numpy arrays and scalars
            v = v.tolist()
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    return json.dumps({m.id: {k: plain(v) for k, v in m.properties_with_values(include_defaults=True).items()}
                       for m in doc.models}, sort_keys=True, default=repr)


def record_sends(session, figure_ids: list) -> dict:
    """Make `session` keep what it would send the page instead of sending it: {figure id:
    the events sent, less what the page has already (`unshown`)}."""
    sent = {fid: [] for fid in figure_ids}

    def send(fid):
        events, session.held[fid] = session.held[fid], []
        sent[fid].extend(session.unshown(fid, events))

    session.send = send
    return sent


REHEARSE_CASES = [(fid, None) for fid in sorted(widgets.FIGURES)] + [
    (fid, next(iter(states))) for fid in sorted(widgets.FIGURES)
    if (states := named_states(importlib.import_module(widgets.FIGURES[fid])))]


@pytest.mark.parametrize("figure_id,state", REHEARSE_CASES,
                         ids=[f"{f}-{s or 'default'}" for f, s in REHEARSE_CASES])
def test_a_rehearsal_moves_every_control_and_leaves_the_figure_as_the_page_has_it(figure_id, state):
    """Once a page's figures are live, the worker moves each control to another value and
    back (PageSession.rehearse), so that a reader's first move runs code the browser has
    compiled already. Afterwards every property of every model is what it was, so the page,
    which is sent nothing, still shows what Python holds; and each control was moved, as
    its callbacks show."""
    from bokeh.settings import settings
    import panel as pn

    from widgets import runtime
    from widgets.state import apply_state

    browser_info = pn.config.browser_info
    try:
        session = runtime.PageSession()
        assert "error" not in json.loads(session.build(figure_id))
        view = session.views[figure_id]
        if state:
            apply_state(view, **named_states(importlib.import_module(widgets.FIGURES[figure_id]))[state])
        sent, moves = record_sends(session, [figure_id])[figure_id], []
        session.link(figure_id, None)
        sent.clear()                       # (a named state's changes, held until linking)
        for key, widget in view.controls.items():
            widget.param.watch(lambda event, key=key: moves.append((key, event.old, event.new)), "value")
        doc = session.docs[figure_id]
        before = model_values(doc)
        controls = [k for k, w in view.controls.items() if not isinstance(w, pn.widgets.Button)]
        assert controls and session.rehearse(figure_id) is None
        assert model_values(doc) == before
        assert sent == []
        for key in controls:               # to another value, then back to the one it had
            mine = [(old, new) for k, old, new in moves if k == key]
            assert mine[0][0] == mine[-1][1] and mine[0][1] != mine[0][0], (key, mine)
    finally:
        runtime._PREBUILT.clear()
        settings.simple_ids.unset_value()
        pn.config.browser_info = browser_info


def test_a_rehearsal_puts_back_a_control_that_another_control_moved():
    """A control whose move sets another (a device with other number formats resets the
    format) leaves both as they were, and the page is sent nothing."""
    from bokeh.document import Document
    import panel as pn

    from widgets import runtime
    from widgets.base import FigureView, readout

    device = pn.widgets.Select(options=["gpu-a", "gpu-b", "cpu"], value="gpu-a")
    fmt = pn.widgets.Select(options=["bf16", "fp8", "fp32"], value="fp8")
    shown = readout()

    def on_device(event):
        if event.new == "cpu":                     # no fp8 here
            fmt.value = "fp32"
        shown.object = f"{device.value} {fmt.value}"
    device.param.watch(on_device, "value")
    fmt.param.watch(lambda event: setattr(shown, "object", f"{device.value} {fmt.value}"), "value")
    shown.object = f"{device.value} {fmt.value}"
    view = FigureView("test-dependent", pn.Column(fmt, device, shown), controls={"fmt": fmt, "device": device},
                      readouts={"shown": shown})
    doc = Document()
    view.layout.server_doc(doc)
    session = runtime.PageSession()
    fid = view.figure_id
    session.docs[fid], session.roots[fid], session.views[fid] = doc, doc.roots[0], view
    sent, seen = record_sends(session, [fid])[fid], []
    session.link(fid, None)
    sent.clear()
    fmt.param.watch(lambda event: seen.append(event.new), "value")
    before = model_values(doc)
    assert session.rehearse(fid) is None
    assert "fp32" in seen                          # the device's move did move the format
    assert (device.value, fmt.value, shown.object) == ("gpu-a", "fp8", "gpu-a fp8")
    assert model_values(doc) == before and sent == []


def test_a_change_between_the_two_halves_of_a_rehearsal_meets_the_figure_as_the_page_shows_it(monkeypatch):
    """The worker rehearses a control in two tasks (PageSession.rehearse_move, then
    rehearse_back), so a reader's change may come between them. A change to another figure
    is applied and sent at once, and nothing of the half-rehearsed figure goes with it; a
    change to the half-rehearsed figure puts its control back first, so each figure ends
    exactly as a session that was never rehearsed would have it after the same changes, and
    the page was sent only what the reader's changes did."""
    import types

    from bokeh.settings import settings
    import panel as pn

    from widgets import runtime

    # apply_patch reads the page's patch with Panel's Pyodide helper, which needs the
    # browser's `js` module; the patches here are plain Bokeh JSON already
    monkeypatch.setitem(sys.modules, "panel.io.pyodide", types.SimpleNamespace(_convert_json_patch=lambda p: p))
    load, latency = "ch05-load", "ch05-latency"
    changes = [(latency, "prompt", 3000), (load, "prefill", 512)]
    browser_info = pn.config.browser_info
    try:
        def session_with(rehearsed: bool):
            session = runtime.PageSession()
            sent = record_sends(session, [load, latency])
            for fid in (latency, load):
                assert "error" not in json.loads(session.build(fid))
                session.link(fid, None)
                sent[fid].clear()
            if rehearsed:
                assert session.rehearse_move(load, "rate") is None
                assert session.views[load].controls["rate"].value != 20 and load in session.away
                assert sent[load] == []
            for n, (fid, key, value) in enumerate(changes):
                widget = session.views[fid].controls[key]
                model = next(m for m, _ in widget._models.values() if m.document is session.docs[fid])
                patch = {"events": [{"kind": "ModelChanged", "model": {"id": model.id}, "attr": k, "new": v}
                                    for k, v in control_patch(fid, key, value).items()]}
                assert session.apply_patch(fid, patch) is None
                if rehearsed and n == 0:    # the other figure's change went; the rehearsed one waits
                    assert sent[latency] and sent[load] == [] and load in session.away
            assert not session.away
            assert session.views[load].controls["rate"].value == 20
            # (Panel names its layouts from a counter of every object it made in the process)
            return ({fid: re.sub(r'"name": "(Column|Row)\d+"', "", model_values(session.docs[fid])) for fid in sent},
                    {fid: sorted((type(e).__name__, e.model.id, getattr(e, "attr", None)) for e in events)
                     for fid, events in sent.items()})

        plain_values, plain_sent = session_with(rehearsed=False)
        runtime._PREBUILT.clear()
        rehearsed_values, rehearsed_sent = session_with(rehearsed=True)
        assert rehearsed_values == plain_values
        assert rehearsed_sent == plain_sent and plain_sent[load] and plain_sent[latency]
    finally:
        runtime._PREBUILT.clear()
        settings.simple_ids.unset_value()
        pn.config.browser_info = browser_info


def fingerprint_differs(fid: str):
    """A route handler serving the page with figure `fid`'s preview fingerprint changed,
    as if Python had built other models than the build did."""
    def handle(route):
        html = route.fetch().text()

        def change(m):
            if m.group(2) != fid:
                return m.group(0)
            data = json.loads(m.group(3))
            data["fingerprint"] = "0" * 16
            return m.group(1) + json.dumps(data, separators=(",", ":")).replace("</", "<\\/") + m.group(4)
        route.fulfill(status=200, content_type="text/html", body=PRERENDER.sub(change, html))
    return handle


@needs_ch04
@pytest.mark.browser
@pytest.mark.parametrize("mismatch", [None, SCHED], ids=["adopted", "embedded-fallback"])
def test_link_and_early_change_reach_the_live_figure(chromium, server, mismatch):
    """A chapter link sets a control of each figure; the reader moves another on the preview
    while Python loads. Each figure goes live (its preview adopted, or, when the fingerprints
    differ, Python's document rendered in its place) showing exactly CPython's result for
    the moved control and then the link's value; a move after that is CPython's too."""
    page = chromium.new_page()
    log = attach(page, server)
    if mismatch:
        page.route(f"**/{PAGE}*", fingerprint_differs(mismatch))
    try:
        # Python is held back (its worker's script is not served yet) until the reader's
        # early moves are made: a restored snapshot can be ready before a test moves anything.
        held = []
        page.route("**/static/worker.js*", lambda route: held.append(route))
        page.goto(server + PAGE + "?" + urlencode({f"{KNEE}.gpu": "H200", f"{SCHED}.slots": "16"}))
        early = {KNEE: ("batch", 512), SCHED: ("chunked", True)}
        for fid, (key, value) in early.items():
            page.locator(f'[data-figure="{fid}"]').scroll_into_view_if_needed()   # previews render on sight
            page.wait_for_function("(id) => window.__guide?.figs?.get(id)?.staticRoot", arg=fid, timeout=30000)
            assert page.evaluate(STATE_JS, fid) in ("static", "loading")
            page.evaluate(SET_JS, [fid, key, control_patch(fid, key, value)])
        assert len(held) == 1, "the page asked for its worker's script once, and got nothing yet"
        held[0].continue_()
        page.unroute("**/static/worker.js*")
        assert wait_states(page, [KNEE, SCHED], timeout_s=180) == {KNEE: "live", SCHED: "live"}
        how = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('[data-figure]')]"
                            ".map(el => [el.dataset.figure, el.dataset.live]))")
        assert how == {KNEE: "adopted", SCHED: "embedded" if mismatch else "adopted"}, how
        asked = {KNEE: [("batch", 512), ("gpu", "H200")], SCHED: [("chunked", True), ("slots", 16)]}
        for fid, changes in asked.items():
            wait_equal(page, fid, cpython_state(fid, changes))
            # one view of the figure, in its frame: nothing rendered twice, no preview left
            assert page.locator(f'[data-figure="{fid}"] .fig-bokeh').count() == 1
            assert page.locator(f'[data-figure="{fid}"] .fig-frame > .fig-bokeh canvas').count() >= 1
            assert page.locator(f'[data-figure="{fid}"] .fig-preview').count() == 0
        page.evaluate(SET_JS, [SCHED, "gpu", control_patch(SCHED, "gpu", "A100-80GB")])
        wait_equal(page, SCHED, cpython_state(SCHED, asked[SCHED] + [("gpu", "A100-80GB")]))
        page.evaluate(SET_JS, [KNEE, "context", control_patch(KNEE, "context", 8192)])
        wait_equal(page, KNEE, cpython_state(KNEE, asked[KNEE] + [("context", 8192)]))
        assert log.errors() == [], log.errors()
    finally:
        page.close()


@needs_ch04
@pytest.mark.browser
def test_figure_in_view_is_built_first(chromium, server):
    """Opened at its second figure, the page has Python build (or take) that one first."""
    page = chromium.new_page()
    log = attach(page, server)
    try:
        page.goto(server + PAGE + f"#fig-{SCHED}")
        assert wait_states(page, [KNEE, SCHED], timeout_s=180) == {KNEE: "live", SCHED: "live"}
        # in the order the page marked them (a figure taken from the memory snapshot is
        # built within a millisecond of the next)
        order = page.evaluate("Object.keys(window.__guide.timing)")
        assert order.index(f"built:{SCHED}") < order.index(f"built:{KNEE}"), order
        assert order.index(f"live:{SCHED}") < order.index(f"live:{KNEE}"), order
        assert log.errors() == [], log.errors()
    finally:
        page.close()


@needs_ch04
@pytest.mark.browser
def test_the_rehearsal_after_going_live_leaves_the_figures_as_the_reader_set_them(chromium, server):
    """Opened with a link's values, both figures go live; then the worker moves controls
    and puts them back (every control of the figure in view, then the next figure's, for
    half a second of its time at most). It sends the page no patch, the figures still show
    CPython's result for the link's values, and a reader's move after it is CPython's too."""
    page = chromium.new_page()
    log = attach(page, server)
    try:
        page.goto(server + PAGE + "?" + urlencode({f"{KNEE}.gpu": "H200", f"{SCHED}.slots": "16"}))
        assert wait_states(page, [KNEE, SCHED], timeout_s=180) == {KNEE: "live", SCHED: "live"}
        page.wait_for_function("() => window.__guide.rehearsal", timeout=60000)
        rehearsal, timing = page.evaluate("() => [window.__guide.rehearsal, window.__guide.timing]")
        controls = len(widgets.build(KNEE).controls) + len(widgets.build(SCHED).controls)
        assert rehearsal["ms"] > 0 and 0 <= rehearsal["left"] < controls, rehearsal
        assert rehearsal["sent"] == 0, rehearsal          # no patch from the worker while it ran
        assert timing["rehearsed"] > max(timing[f"live:{KNEE}"], timing[f"live:{SCHED}"]), timing
        asked = {KNEE: [("gpu", "H200")], SCHED: [("slots", 16)]}
        # the page applies a link's values once its figure is live, each after Python has
        # handled the one before, and says so when Python is idle after the last
        # (static/state.js applyLink); the rehearsal may end before that
        for fid in asked:
            page.wait_for_function("(id) => document.querySelector(`[data-figure='${id}'] .fig-status-text`)"
                                   ".textContent.includes(\"link's settings\")", arg=fid, timeout=60000)
        for fid, changes in asked.items():
            assert not close(page.evaluate(COLLECT_JS, [fid, "live"]), cpython_state(fid, changes)), fid
        page.evaluate(SET_JS, [KNEE, "context", control_patch(KNEE, "context", 8192)])
        wait_equal(page, KNEE, cpython_state(KNEE, asked[KNEE] + [("context", 8192)]))
        assert log.errors() == [], log.errors()
    finally:
        page.close()


def open_live(chromium, server):
    """The ch04 page with both figures live, and its log."""
    page = chromium.new_page()
    log = attach(page, server)
    page.goto(server + PAGE)
    assert wait_states(page, [KNEE, SCHED], timeout_s=180) == {KNEE: "live", SCHED: "live"}
    return page, log


@needs_ch04
@pytest.mark.browser
def test_a_move_comes_back_from_python_as_one_patch(chromium, server):
    """All that one move of a control changes in Python (the scheduler figure's GPU: twelve
    data sources, an axis range, the readouts) reaches the page as one patch, applied at
    once, rather than a message and a page update per changed property."""
    page, log = open_live(chromium, server)
    try:
        page.wait_for_timeout(1000)
        page.evaluate("""() => {
          window.__patches = [];
          window.__guide.worker.addEventListener('message', (e) => {
            if (e.data.type === 'patch') window.__patches.push([e.data.figure, e.data.patch.events.length]);
          });
        }""")
        page.evaluate(SET_JS, [SCHED, "gpu", control_patch(SCHED, "gpu", "A100-80GB")])
        wait_equal(page, SCHED, cpython_state(SCHED, [("gpu", "A100-80GB")]))
        page.wait_for_timeout(500)
        patches = page.evaluate("window.__patches")
        assert len(patches) == 1 and patches[0][0] == SCHED and patches[0][1] >= 12, patches
        assert log.errors() == [], log.errors()
    finally:
        page.close()


@needs_ch04
@pytest.mark.browser
def test_a_change_python_refuses_puts_its_figure_in_the_error_state(chromium, server):
    """A value the figure refuses (a batch far beyond the slider's end, as only a broken
    page could send) fails in Python: that figure shows the error, the other stays live."""
    page, log = open_live(chromium, server)
    try:
        page.evaluate(SET_JS, [KNEE, "batch", {"value": 10 ** 9}])
        assert wait_states(page, [KNEE], states=("error",), timeout_s=30) == {KNEE: "error"}
        message = page.locator(f'[data-figure="{KNEE}"] .fig-error').inner_text()
        assert "ValueError" in message and "batch" in message, message
        assert any(f"figure {KNEE}" in t for _, t in log.errors())
        page.evaluate(SET_JS, [SCHED, "gpu", control_patch(SCHED, "gpu", "A100-80GB")])
        wait_equal(page, SCHED, cpython_state(SCHED, [("gpu", "A100-80GB")]))
        assert page.evaluate(STATE_JS, SCHED) == "live"
    finally:
        page.close()
