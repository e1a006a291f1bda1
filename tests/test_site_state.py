"""Browser tests of sharing a figure: its controls in the page's address, copy link / embed
code, and embed mode (figure-<id>.html?embed=1). Generic over every figure of the site
under test; one server and one browser for the session (conftest.py)."""
from __future__ import annotations

import json
import re
from html import unescape
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

import widgets
from builder.prerender import url_controls, url_token
from tests.browser import attach, wait_states
from tests.figures import (COLLECT_JS, SET_JS, CPythonFigure, alternate_value, apply_change, close, collect,
                           cpython_state)
from tests.test_site_browser import CHAPTERS, FIGURES, PAGES, wait_equal

pytestmark = pytest.mark.browser

# Every text the figures' status lines show (from the first byte of the page).
TRACK_STATUS_JS = """
window.__status = [];
new MutationObserver((records) => {
  for (const r of records) {
    const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    const t = el && el.closest && el.closest('.fig-status-text');
    if (t) window.__status.push(t.textContent);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""

# What a link may carry that fits no control: each is refused for every kind of control.
HOSTILE = ['<img src=x onerror="window.__pwned=1">', "1e400", "NaN", "-Infinity", "\uff11\uff12\uff18",
           "__proto__", "", "9" * 400, "null", "0x10", "constructor"]


def js_number(v) -> str:
    """A number as JavaScript's String() prints it (shortest round trip, like Python's repr)."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else repr(v)


def changes_of(figure_id: str) -> list[tuple[str, object, str]]:
    """Every control (but buttons) moved to its alternate value, in the figure's order:
    (key, value, the value as a link writes it)."""
    view = widgets.build(figure_id)
    spec = url_controls(view)
    return [(k, v, js_number(v) if spec[k]["kind"] == "number" else url_token(v))
            for k, w in view.controls.items() if (v := alternate_value(w)) is not None]


def expected_link(figure_id: str, changes) -> list[tuple[str, str]]:
    """The (key, value) pairs a link to the figure writes after `changes` (made in CPython):
    each control off its default, and each that another control's change set (a preset
    setting lengths), in the figure's order of controls."""
    view = widgets.build(figure_id)
    spec = url_controls(view)
    set_by_figure = set()
    for key, value, _ in changes:
        before = {k: view.controls[k].value for k in spec}
        apply_change(view, key, value)
        set_by_figure |= {k for k in spec if k != key and view.controls[k].value != before[k]}
    out = []
    for k, s in spec.items():
        v = view.controls[k].value
        text = js_number(v) if s["kind"] == "number" else url_token(v)
        default = js_number(s["default"]) if s["kind"] == "number" else url_token(s["default"])
        if text != default or k in set_by_figure:
            out.append((k, text))
    return out


def open_page(chromium, server, path, viewport=None):
    page = chromium.new_page()
    if viewport:
        page.set_viewport_size(viewport)
    page.add_init_script(TRACK_STATUS_JS)
    log = attach(page, server)
    page.goto(server + path)
    return page, log


def copied(page, figure_id: str, button: str) -> str:
    """Click a figure's copy button; the text it offers (the box shows it either way)."""
    fig = page.locator(f'[data-figure="{figure_id}"]')
    fig.locator(f".fig-copy-{button}").click()
    box = fig.locator(".fig-share-text")
    said = fig.locator(".fig-share-said")
    page.wait_for_function("(el) => el.textContent !== ''", arg=said.element_handle(), timeout=5000)
    text = box.input_value()
    page.evaluate("(el) => { el.textContent = ''; }", said.element_handle())   # for the next click
    return text


def control_values(page, figure_id: str) -> dict:
    """The live figure's controls as its copy link writes them (only non-default ones)."""
    link = copied(page, figure_id, "link")
    return {k.removeprefix(f"{figure_id}."): v for k, v in parse_qsl(urlsplit(link).query, keep_blank_values=True)}


@pytest.mark.parametrize("figure_id,page_file", FIGURES, ids=[f for f, _ in FIGURES])
def test_figure_state_round_trips_through_embed_code(chromium, server, figure_id, page_file):
    """Move every control on the figure page, one at a time: each move changes what the figure
    shows, to exactly the CPython result. Then copy the embed code and open its src: the
    embedded figure (no page chrome, sized by the code) goes live at the same state."""
    changes = changes_of(figure_id)
    page, log = open_page(chromium, server, f"figure-{figure_id}.html")
    here = CPythonFigure(figure_id)
    expected = collect(here.root, figure_id)
    try:
        assert wait_states(page, [figure_id], timeout_s=180) == {figure_id: "live"}
        before = page.evaluate(COLLECT_JS, [figure_id, "live"])
        for key, value, _ in changes:                   # one at a time, as a reader would
            patch, expected = here.move(key, value)
            assert patch, f"{figure_id}.{key}: changing it to {value!r} sets no Bokeh property"
            page.evaluate(SET_JS, [figure_id, key, patch])
            shown = wait_equal(page, figure_id, expected)
            assert close(shown, before), f"{figure_id}.{key}: moving it changed nothing"
            before = shown
        link = copied(page, figure_id, "link")
        code = copied(page, figure_id, "embed")
        assert log.errors() == [], log.errors()
    finally:
        page.close()
    assert parse_qsl(urlsplit(link).query) == expected_link(figure_id, changes)
    m = re.fullmatch(r'<iframe src="([^"]+)" width="(\d+)" height="(\d+)" title="[^"]*" style="border:0" loading="lazy"></iframe>', code)
    assert m, code
    src, width, height = unescape(m.group(1)), int(m.group(2)), int(m.group(3))
    assert urlsplit(src).path.endswith(f"/figure-{figure_id}.html")
    assert parse_qsl(urlsplit(src).query) == [("embed", "1")] + parse_qsl(urlsplit(link).query)

    page, log = open_page(chromium, server, src.removeprefix(server), viewport={"width": width, "height": height})
    try:
        assert wait_states(page, [figure_id], timeout_s=180) == {figure_id: "live"}
        shown = wait_equal(page, figure_id, expected)
        assert shown == page.evaluate(COLLECT_JS, [figure_id, "live"])
        if changes:
            said = page.evaluate("window.__status")
            assert any("once live" in s and changes[0][0] in s for s in said), said
        # embed mode: the figure alone, its link back to the guide, no page chrome
        assert page.evaluate("document.documentElement.classList.contains('embed')")
        for sel in ("header", "nav", "footer", ".from", ".fig-share", "h1"):
            assert not any(e.is_visible() for e in page.locator(sel).all()), f"{figure_id}: {sel} shown in embed mode"
        back = page.locator("a.embed-back")
        assert back.is_visible()
        chapter_link = page.evaluate("() => { const a = document.querySelector('a.embed-back');"
                                     " a.dispatchEvent(new Event('focus')); return a.href; }")
        parts = urlsplit(chapter_link)
        assert parts.path.endswith("/" + page_file) and parts.fragment == f"fig-{figure_id}"
        assert parse_qsl(parts.query) == [(f"{figure_id}.{k}", w) for k, w in expected_link(figure_id, changes)]
        # the size the embed code gave fits the live figure: nothing cut off sideways
        overflow = page.evaluate("document.scrollingElement.scrollWidth")
        assert overflow <= width, (figure_id, overflow, width)
        box = page.locator(f'[data-figure="{figure_id}"] .fig-frame > .fig-bokeh').bounding_box()
        assert box["x"] + box["width"] <= width and box["y"] + box["height"] <= height, (box, width, height)
        assert page.locator(".fig-url-note").count() == 0
        page.wait_for_timeout(200)
        assert log.errors() == [], log.errors()
        assert log.off_site() == [] and log.failed == [], (log.off_site(), log.failed)
    finally:
        page.close()


def hostile_link(figure_ids: list[str]) -> tuple[list[tuple[str, str]], dict, dict]:
    """A chapter page's query: for every figure, every other control gets a valid value
    after a hostile one (the last wins), the rest only a hostile one (the default stays);
    unknown keys and a key naming no figure. -> (params, changes per figure, keys refused per figure)."""
    params, changes, refused = [("no-such-figure.batch", "64")], {}, {}
    n = 0
    for fid in figure_ids:
        changes[fid], refused[fid] = [], ["__proto__", "<b>x</b>"]
        params += [(f"{fid}.__proto__", "1"), (f"{fid}.<b>x</b>", "2")]
        for i, (key, value, written) in enumerate(changes_of(fid)):
            bad = HOSTILE[n % len(HOSTILE)]
            n += 1
            params.append((f"{fid}.{key}", bad))
            if i % 2 == 0:
                params.append((f"{fid}.{key}", written))
                changes[fid].append((key, value, written))
            else:
                refused[fid].append(key)
    return params, changes, refused


@pytest.mark.parametrize("page_file,figure_ids", PAGES, ids=[p for p, _ in PAGES])
def test_chapter_link_restores_state_and_refuses_hostile_values(chromium, server, page_file, figure_ids):
    """A chapter link with figure-prefixed keys: valid values reach the live figures (the
    last of a repeated key wins), hostile ones are refused with a note, nothing logs an error;
    each figure's copy link writes back exactly the values it took."""
    params, changes, refused = hostile_link(figure_ids)
    page, log = open_page(chromium, server, page_file + "?" + urlencode(params))
    try:
        notes = {fid: page.locator(f'[data-figure="{fid}"] .fig-url-note') for fid in figure_ids}
        assert notes[figure_ids[0]].is_visible()   # shown with the poster, before anything is live
        assert '"no-such-figure.batch" names no figure' in notes[figure_ids[0]].inner_text()
        assert wait_states(page, figure_ids, timeout_s=180) == {f: "live" for f in figure_ids}
        for fid in figure_ids:
            wait_equal(page, fid, cpython_state(fid, [(k, v) for k, v, _ in changes[fid]]))
            text = notes[fid].inner_text()
            for key in refused[fid]:
                assert json.dumps(key) in text or f"{key}=" in text, (fid, key, text)
            for key, _, _ in changes[fid]:
                assert f"{key} is given 2 times; the last one is used" in text, (fid, key, text)
            assert control_values(page, fid) == dict(expected_link(fid, changes[fid]))
        assert page.evaluate("window.__pwned") is None
        page.wait_for_timeout(200)
        assert log.errors() == [], log.errors()
        assert log.off_site() == [] and log.failed == [], (log.off_site(), log.failed)
    finally:
        page.close()


def test_every_control_can_be_written_in_a_link():
    """Each figure's controls (but buttons) are described for links, with their defaults."""
    import panel as pn

    for fid in widgets.FIGURES:
        view = widgets.build(fid)
        spec = url_controls(view)
        assert set(spec) == {k for k, w in view.controls.items() if not isinstance(w, pn.widgets.Button)}, fid
        for key, s in spec.items():
            w = view.controls[key]
            if s["kind"] == "choice":
                assert url_token(w.value) == s["default"] and s["default"] in s["tokens"], (fid, key)
            else:
                assert s["default"] == w.value, (fid, key)
            if s["kind"] == "number":
                assert s["start"] <= w.value <= s["end"] and s["step"] > 0, (fid, key)


def test_every_plot_has_a_png_download():
    """Bokeh's save tool (PNG of the plot as shown) is on every plot of every figure."""
    from bokeh.models import Plot, SaveTool
    from bokeh.document import Document

    for fid in widgets.FIGURES:
        root = widgets.build(fid).layout.get_root(Document())
        plots = [m for m in root.references() if isinstance(m, Plot)]
        assert plots, fid
        for p in plots:
            assert any(isinstance(t, SaveTool) for t in p.toolbar.tools), f"{fid}: a plot without a save tool"


def test_url_tokens():
    assert [url_token(v) for v in (True, False, 256, 0.025, "H200")] == ["true", "false", "256", "0.025", "H200"]
    assert [js_number(v) for v in (1.0, 0.7, 64, 0.1 + 0.2)] == ["1", "0.7", "64", "0.30000000000000004"]
