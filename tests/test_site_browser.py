"""Browser tests: the built site, served on localhost, in headless Chromium.

Parametrized over every chapter and every figure, so a chapter is tested the day it
lands. One server and one browser serve the whole session (see conftest.py).
"""
from __future__ import annotations

import re
import shutil
import time
import zipfile
from pathlib import Path

import pytest

import widgets
from builder.serve import serving
from tests.browser import STATE_JS, attach, wait_states
from tests.conftest import built_chapters
from tests.figures import COLLECT_JS, SET_JS, close, control_patch, cpython_state

pytestmark = pytest.mark.browser

CHAPTERS = built_chapters()
PAGES = [(c["file"], c["figures"]) for c in CHAPTERS if c["figures"]]
FIGURES = [(f, c["file"]) for c in CHAPTERS for f in c["figures"]]

# Record every data-state a figure passes through (from the first byte of the page).
TRACK_STATES_JS = """
window.__states = {};
new MutationObserver((records) => {
  for (const r of records) {
    const el = r.target;
    if (!(el.dataset && el.dataset.figure)) continue;
    // every state a figure leaves (the first: the state the page was served with)
    (window.__states[el.dataset.figure] ||= []).push(r.oldValue);
  }
}).observe(document, {subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ['data-state']});
"""


def open_live(chromium, base: str, page_file: str, figure_ids: list[str]):
    page = chromium.new_page()
    page.add_init_script(TRACK_STATES_JS)
    log = attach(page, base)
    page.goto(base + page_file)
    states = wait_states(page, figure_ids, timeout_s=180)
    return page, log, states


def wait_equal(page, figure_id: str, expected: dict, timeout_s: float = 30) -> dict:
    """Poll the live figure until it shows `expected` (within float tolerance)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = page.evaluate(COLLECT_JS, [figure_id, "live"])
        diffs = close(got, expected)
        if not diffs:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{figure_id}: browser differs from CPython: {diffs[:6]}")
        time.sleep(0.1)


@pytest.mark.parametrize("page_file,figure_ids", PAGES, ids=[p for p, _ in PAGES])
def test_page_goes_live_offline(chromium, server, page_file, figure_ids):
    """Every figure moves static -> loading -> live; no errors, nothing fetched off-site."""
    page, log, states = open_live(chromium, server, page_file, figure_ids)
    try:
        assert states == {f: "live" for f in figure_ids}, states
        seen = page.evaluate("window.__states")
        for fid in figure_ids:
            states = seen[fid] + [page.evaluate(STATE_JS, fid)]
            trail = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
            assert trail[0] == "static" and trail[-1] == "live" and "loading" in trail, (fid, trail)
            # the preview became the live figure: Python built the same models (no second document)
            assert page.evaluate("(id) => document.querySelector(`[data-figure='${id}']`).dataset.live", fid) == "adopted"
            # the live figure shows exactly what CPython computes for the default controls
            wait_equal(page, fid, cpython_state(fid), timeout_s=5)
            # ...and is drawn inside its own container (plots on canvases), not elsewhere
            live = page.locator(f'[data-figure="{fid}"] .fig-frame > .fig-bokeh')
            assert live.count() == 1, f"{fid}: {live.count()} live views in the figure"
            box = live.bounding_box()
            assert box and box["height"] > 100 and box["width"] > 200, (fid, box)
            assert page.locator(f'[data-figure="{fid}"] .fig-frame canvas').count() >= 1, f"{fid}: nothing drawn"
        stray = page.evaluate("""() => [...document.body.children].filter(el =>
            !el.hidden && !['HEADER', 'NAV', 'MAIN', 'SCRIPT'].includes(el.tagName)
            && el.getBoundingClientRect().height > 0).map(el => el.outerHTML.slice(0, 80))""")
        assert stray == [], f"content rendered outside the page layout: {stray}"
        page.wait_for_timeout(300)
        assert log.errors() == [], log.errors()
        assert log.failed == [], log.failed
        assert log.off_site() == [], log.off_site()
        # Panel's stylesheets are in the figures' documents (widgets.runtime.inline_panel_stylesheets)
        linked = [u for u in log.requests if re.search(r"/vendor/panel/[^/]+/dist/(css|bundled)/", u)]
        assert linked == [], linked
    finally:
        page.close()


def steppers() -> list[tuple[str, str, str]]:
    """(figure id, page, control key) of every step/back/play/reset control."""
    import panel as pn
    out = []
    for fid, page_file in FIGURES:
        for key, w in widgets.build(fid).controls.items():
            if isinstance(w, pn.widgets.Player):
                out.append((fid, page_file, key))
    return out


STEPPERS = steppers()


@pytest.mark.parametrize("figure_id,page_file,key", STEPPERS, ids=[f"{f}.{k}" for f, _, k in STEPPERS])
def test_stepper_steps_plays_reaches_the_end_and_resets(chromium, server, figure_id, page_file, key):
    """The stepper's own buttons, clicked: next, last, first (reset), play then pause."""
    page, log, _ = open_live(chromium, server, page_file, [figure_id])
    try:
        player = widgets.build(figure_id).controls[key]
        button = lambda name: page.locator(f'[data-figure="{figure_id}"] .ctl-{key} .{name}').first
        button("next").click()
        wait_equal(page, figure_id, cpython_state(figure_id, [(key, player.start + 1)]))
        button("last").click()
        wait_equal(page, figure_id, cpython_state(figure_id, [(key, player.end)]))
        button("first").click()
        wait_equal(page, figure_id, cpython_state(figure_id, [(key, player.start)]))
        button("play").click()
        page.wait_for_function(
            """([id, key, v]) => { const f = window.__guide.figs.get(id);
                 const m = [f.liveRoot, ...f.liveRoot.references()].find(m => (m.css_classes || []).includes(`ctl-${key}`));
                 return m.value >= v; }""", arg=[figure_id, key, min(player.start + 2, player.end)], timeout=30000)
        button("pause").click()
        page.wait_for_timeout(1500)
        value = page.evaluate(
            """([id, key]) => { const f = window.__guide.figs.get(id);
                 return [f.liveRoot, ...f.liveRoot.references()].find(m => (m.css_classes || []).includes(`ctl-${key}`)).value; }""",
            [figure_id, key])
        wait_equal(page, figure_id, cpython_state(figure_id, [(key, value)]))
        assert log.errors() == [], log.errors()
    finally:
        page.close()


needs_ch04 = pytest.mark.skipif(not any(c["file"] == "ch04-batching.html" for c in CHAPTERS),
                                reason="the site under test was built without chapter 4")


@needs_ch04
def test_batch_slider_matches_sim_in_cpython(chromium, server):
    """ch04-batch-knee: the plotted point for a batch equals the sim's own number."""
    from sim import batching

    fid = "ch04-batch-knee"
    page, log, _ = open_live(chromium, server, "ch04-batching.html", [fid])
    try:
        for batch in (256, 7, 1024):
            page.evaluate(SET_JS, [fid, "batch", control_patch(fid, "batch", batch)])
            shown = wait_equal(page, fid, cpython_state(fid, [("batch", batch)]))
            r = batching.sweep_batch(batching.BatchSweepParams(batch=batch, model="llama-3.1-8b",
                                                                gpu="H100-SXM", context_tokens=256))
            assert shown["sources"]["point"]["batch"] == [batch]
            assert shown["sources"]["point"]["step_ms"][0] == pytest.approx(r.step_time_s_at_batch * 1e3, rel=1e-12)
            assert shown["sources"]["curve"]["step_ms"] == pytest.approx((r.step_time_s * 1e3).tolist(), rel=1e-12)
        assert log.errors() == []
    finally:
        page.close()


@needs_ch04
def test_change_before_live_is_applied_when_live(chromium, server):
    """A slider moved on the static preview is carried into the live figure. The Python
    worker's script is held back until the move is made: a snapshot restored from the
    browser's storage can otherwise be live before the preview is."""
    fid = "ch04-batch-knee"
    page = chromium.new_page()
    log = attach(page, server)
    held = []
    page.route("**/static/worker.js", lambda route: held.append(route))
    try:
        page.goto(server + "ch04-batching.html")
        page.locator(f'[data-figure="{fid}"]').scroll_into_view_if_needed()   # previews render on sight
        page.wait_for_function("(id) => window.__guide?.figs?.get(id)?.staticRoot", arg=fid, timeout=30000)
        assert page.evaluate(STATE_JS, fid) in ("static", "loading")
        page.evaluate(SET_JS, [fid, "batch", control_patch(fid, "batch", 512)])
        for _ in range(100):
            if held:
                break
            page.wait_for_timeout(100)
        assert held, "the page never asked for its Python worker"
        for route in held:
            route.continue_()
        page.unroute("**/static/worker.js")
        assert wait_states(page, [fid], timeout_s=180) == {fid: "live"}
        wait_equal(page, fid, cpython_state(fid, [("batch", 512)]))
        assert log.errors() == []
    finally:
        page.close()


@needs_ch04
def test_standalone_figure_page(chromium, server):
    fid = "ch04-batch-knee"
    page, log, states = open_live(chromium, server, f"figure-{fid}.html", [fid])
    try:
        assert states == {fid: "live"}
        assert log.errors() == [] and log.off_site() == []
    finally:
        page.close()


@needs_ch04
@pytest.mark.parametrize("damage,expected", [
    ("wheel", "llm-inference-guide"),           # the guide's wheel no longer matches the lock
    ("bokehjs", "bokeh.min.js"),                # the figure library is missing
])
def test_failing_runtime_shows_the_error_state(chromium, site_dir, tmp_path, damage, expected):
    """A broken runtime file: each figure says what failed, none is left blank."""
    broken = tmp_path / "site"
    shutil.copytree(site_dir, broken)
    if damage == "wheel":
        wheel = next((broken / "vendor/pyodide").glob("llm_inference_guide-*.whl"))
        with zipfile.ZipFile(wheel, "a") as z:          # the lock's sha256 no longer matches
            z.writestr("widgets/extra.py", "x = 1\n")
        for ext in (".gz", ".br"):                      # compressed copies served instead, if there
            (wheel.parent / (wheel.name + ext)).unlink(missing_ok=True)
    else:
        for p in (broken / "vendor/bokeh").glob("bokeh.min.js*"):
            p.unlink()
    with serving(broken) as base:
        page = chromium.new_page()
        log = attach(page, base)
        # the wheels are installed by the normal boot only (a restored snapshot holds them)
        page.goto(base + "ch04-batching.html" + ("?boot=normal" if damage == "wheel" else ""))
        states = wait_states(page, ["ch04-batch-knee"], timeout_s=180)
        assert states == {"ch04-batch-knee": "error"}
        message = page.locator('[data-figure="ch04-batch-knee"] .fig-error').inner_text()
        assert expected in message or expected.replace("-", "_") in message, message
        # the static preview is still there, not a blank box
        assert page.locator('[data-figure="ch04-batch-knee"] .fig-preview').count() == 1
        assert page.locator('[data-figure="ch04-batch-knee"] .fig-preview').inner_html().strip()
        assert any("figure ch04-batch-knee" in t for _, t in log.errors())
        page.close()
