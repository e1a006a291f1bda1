"""Every reader: a page never scrolls sideways at phone, tablet, projector and desktop widths
(a wide table or figure scrolls inside its own box), the keyboard's focus is visible, and a
chapter prints with its figures' posters and no controls."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from builder.pages import MOVED
from tests.browser import wait_states
from tests.conftest import SITE, built_chapters

pytestmark = pytest.mark.browser

WIDTHS = (360, 390, 768, 1024, 1440)
# every page of the site but the ones that only send the reader on to a page that moved
PAGES = sorted(p.name for p in SITE.glob("*.html") if p.name not in MOVED) if SITE.is_dir() else []

# What sticks out of the page: elements past its right edge that no box of their own clips
# (a box that scrolls sideways, or hides what overflows); and figures wider than `main`.
OVERFLOW_JS = """() => {
  const de = document.documentElement;
  const clipped = (el) => { for (let p = el.parentElement; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return true; }
    return false; };
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > de.clientWidth + 1 && el.checkVisibility() && !clipped(el))
      out.push(`${el.tagName}.${el.className}`);
  }
  const main = document.querySelector('main')?.getBoundingClientRect();
  const wide = [...document.querySelectorAll('figure.fig')].filter(f => main && f.getBoundingClientRect().width > main.width + 17)
    .map(f => f.dataset.figure);
  return {scroll: de.scrollWidth, client: de.clientWidth, out: out.slice(0, 5), wide};
}"""


# Layout shifts as the page reports them (the Layout Instability API), summed as CLS does
# for a page whose reader has not yet pressed anything: from the first byte of the page.
CLS_JS = """
window.__cls = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (!e.hadRecentInput) window.__cls += e.value;
}).observe({type: 'layout-shift', buffered: true});
"""


@pytest.fixture(scope="module")
def page(chromium):
    p = chromium.new_page()
    p.add_init_script(CLS_JS)
    yield p
    p.set_viewport_size({"width": 1100, "height": 900})
    p.emulate_media(media="screen")
    p.close()


@pytest.fixture(scope="module")
def text_page(chromium):
    """A page that loads no runtime (the page's own text, styles and figure posters only):
    the page-width checks need no live figure (a live one: test_on_a_phone_...)."""
    p = chromium.new_page()
    p.route("**/vendor/**", lambda r: r.abort())
    p.route("**/static/worker.js", lambda r: r.abort())
    yield p
    p.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways(text_page, server, width):
    """Every page at the five widths (its screenshots kept in $GUIDE_SCREENSHOTS, when set,
    for a person to look through: <page>-<width>.png)."""
    page = text_page
    page.set_viewport_size({"width": width, "height": 844})
    shots = os.environ.get("GUIDE_SCREENSHOTS")
    bad = {}
    for name in PAGES:
        page.goto(server + name, wait_until="load")
        if shots:
            page.screenshot(path=str(Path(shots) / f"{name.removesuffix('.html')}-{width}.png"), full_page=True)
        got = page.evaluate(OVERFLOW_JS)
        if got["scroll"] > got["client"] or got["out"] or got["wide"]:
            bad[name] = got
    assert len(PAGES) > 30 and bad == {}, bad


def test_a_wide_table_scrolls_in_its_own_box_and_takes_the_keyboard(page, server):
    """Chapter 13's engine table is wider than a phone: its box scrolls, reachable by Tab."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server + "ch13-engines.html", wait_until="load")
    box = page.evaluate("""() => { const b = document.querySelector('.table-scroll');
      return {scroll: b.scrollWidth, client: b.clientWidth, tab: b.tabIndex, role: b.getAttribute('role'),
              label: b.getAttribute('aria-label')}; }""")
    assert box["scroll"] > box["client"] and box["tab"] == 0 and box["role"] == "region" and box["label"]
    page.focus(".table-scroll")
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(100)
    assert page.evaluate("() => document.querySelector('.table-scroll').scrollLeft") > 0


def test_the_keyboard_focus_is_visible(page, server):
    page.set_viewport_size({"width": 1024, "height": 800})
    page.goto(server + "ch04-batching.html", wait_until="load")
    page.keyboard.press("Tab")
    ring = page.evaluate("""() => { const s = getComputedStyle(document.activeElement);
      return {tag: document.activeElement.tagName, style: s.outlineStyle, width: parseFloat(s.outlineWidth)}; }""")
    assert ring["tag"] == "A" and ring["style"] == "solid" and ring["width"] >= 2, ring


def test_a_chapter_prints_with_its_posters_and_no_controls(page, server):
    chapter = "ch04-batching.html"
    page.set_viewport_size({"width": 1024, "height": 800})
    page.goto(server + chapter)
    figures = page.evaluate("() => [...document.querySelectorAll('figure.fig')].map(f => f.dataset.figure)")
    assert wait_states(page, figures, states=("live",), timeout_s=120) == {f: "live" for f in figures}
    page.emulate_media(media="print")
    shown = page.evaluate("""(ids) => ids.map(id => {
      const f = document.querySelector(`[data-figure="${id}"]`);
      const visible = (el) => !!el && getComputedStyle(el).display !== 'none' && el.getBoundingClientRect().height > 0;
      return {poster: visible(f.querySelector('.fig-print-only')), plots: f.querySelectorAll('.fig-print-only svg.fig-poster-plot').length,
              live: visible(f.querySelector('.fig-frame')), share: visible(f.querySelector('.fig-share')),
              controls: [...f.querySelectorAll('.fig-print-only .pst-ctl')].filter(visible).length};
    })""", figures)
    for fid, s in zip(figures, shown):
        assert s == {"poster": True, "plots": s["plots"], "live": False, "share": False, "controls": 0}, (fid, s)
        assert s["plots"] >= 1, fid
    pdf = page.pdf(format="A4", print_background=False)
    page.emulate_media(media="screen")
    assert pdf[:5] == b"%PDF-"
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert 3 <= pages <= 40, pages
    refs = page.evaluate("() => document.querySelectorAll('a.cite').length")
    assert refs > 0                                        # the references stay in the text


CHAPTERS = [c for c in built_chapters() if c["figures"]]
# For each figure: its frame's widths, its widest plot, and whether every control sits
# above every plot (the layout wrapped: controls first, plots under them).
REFLOW_JS = """(id) => {
  const fig = document.querySelector(`[data-figure="${id}"]`);
  const frame = fig.querySelector('.fig-frame');
  const root = [...Bokeh.index.roots].find(v => frame.contains(v.el));
  const controls = [], plots = [], titles = [];
  (function walk(v) {
    if (!v || !v.el || typeof v.el.getBoundingClientRect !== 'function') return;
    const t = v.model.type, r = v.el.getBoundingClientRect();
    if (t === 'Figure' || t === 'Plot') {
      plots.push({top: r.top, width: r.width});
      // a title line wider than the plot's frame is clipped by its canvas
      const ctx = document.createElement('canvas').getContext('2d'), title = v.model.title;
      if (title && title.text) {
        ctx.font = `${title.text_font_style} ${title.text_font_size} ${title.text_font}`;
        for (const line of title.text.split('\\n'))
          if (ctx.measureText(line).width > v.model.inner_width + 1) titles.push(line);
      }
      return;
    }
    if (/Select|Slider|RadioButtonGroup|Toggle|Checkbox|Button/.test(t) && r.width > 0) controls.push(r);
    for (const c of (v.children ? v.children() : [])) walk(c);
  })(root);
  const frameBox = frame.getBoundingClientRect();
  return {scroll: frame.scrollWidth, client: frame.clientWidth, right: Math.round(frameBox.right),
          widestPlot: Math.max(0, ...plots.map(r => r.width)), titles,
          // the first control (the controls come first in every figure) above the first plot
          stacked: !controls.length || !plots.length || Math.min(...plots.map(r => r.top)) >= controls[0].bottom - 1};
}"""


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c["file"] for c in CHAPTERS])
def test_on_a_phone_figures_reflow_and_the_keyboard_moves_them(page, server, chapter, axe_js):
    """At 390 px a figure reflows: its controls stack above its plots, its plots take the
    width they are given (none wider than the figure's box, which never scrolls
    sideways), a plot's title fits in it, and every control is a target of 24 x 24 px at
    least. The page moves by no more than a CLS of 0.1 from its first paint to its figures
    live; axe-core finds no serious or critical violation on it. Then the keyboard alone
    moves every control of the chapter's first figure (check_keyboard_moves)."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server + chapter["file"])
    wait_states(page, chapter["figures"], states=("live",), timeout_s=120)
    for fid in chapter["figures"]:
        got = page.evaluate(REFLOW_JS, fid)
        assert got["stacked"], (fid, got)
        assert got["right"] <= 390 and got["scroll"] <= got["client"] + 1, (fid, got)
        assert got["widestPlot"] <= got["client"] and got["titles"] == [], (fid, got)
        small = page.evaluate(TOUCH_JS, fid)
        assert small == [], (fid, small)
    cls = page.evaluate("() => window.__cls")
    assert cls <= 0.1, (chapter["file"], cls)
    assert axe_violations(page, axe_js) == []
    check_keyboard_moves(page, chapter["figures"][0])


# The middle of the first plot wider than 200 px of the page's first figure, in viewport pixels.
PLOT_MIDDLE_JS = """() => {
  const found = [];
  const walk = (root) => { for (const e of root.querySelectorAll('*')) { if (e.shadowRoot) walk(e.shadowRoot);
    if (e.tagName === 'CANVAS' && e.getBoundingClientRect().width > 200) found.push(e); } };
  walk(document.querySelector('figure.fig'));
  const b = found[0].getBoundingClientRect();
  return {x: b.x + b.width / 2, y: b.y + b.height / 2};
}"""


def test_on_a_phone_a_finger_drawn_over_a_plot_scrolls_the_page(page, server):
    """A plot takes no drag of its own until the reader picks a tool in its toolbar, so on a
    touch screen a swipe that starts on a plot scrolls the page (as it would over text)."""
    page.set_viewport_size({"width": 390, "height": 844})
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
    try:
        chapter = next(c for c in CHAPTERS if c["figures"])
        page.goto(server + chapter["file"])
        wait_states(page, chapter["figures"][:1], states=("live",), timeout_s=120)
        at = page.evaluate(PLOT_MIDDLE_JS)
        page.evaluate(f"window.scrollBy(0, {at['y']} - 422)")
        page.wait_for_timeout(300)
        at, before = page.evaluate(PLOT_MIDDLE_JS), page.evaluate("window.scrollY")
        cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [at]})
        for i in range(1, 11):
            cdp.send("Input.dispatchTouchEvent", {"type": "touchMove",
                                                  "touchPoints": [{"x": at["x"], "y": at["y"] - 20 * i}]})
            page.wait_for_timeout(16)
        cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        page.wait_for_timeout(500)
        assert page.evaluate("window.scrollY") >= before + 100, chapter["file"]
    finally:
        cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": False})
        cdp.detach()


# A figure's touch targets smaller than 24 x 24 px (WCAG 2.2, 2.5.8): a slider's handle,
# a checkbox, a menu, a button (its plots' toolbars aside).
TOUCH_JS = """(id) => {
  const small = [];
  const visit = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) visit(el.shadowRoot);
      if (!el.matches('.noUi-handle, input[type=checkbox], input[type=radio], input[type=range], select, button')) continue;
      if (el.closest('.bk-toolbar') || (el.getRootNode().host || {}).closest?.('.bk-Toolbar, .bk-toolbar')) continue;
      const r = el.getBoundingClientRect();
      if (r.width && (r.width < 24 || r.height < 24)) small.push(`${el.tagName}.${el.className} ${Math.round(r.width)}x${Math.round(r.height)}`);
    }
  };
  visit(document.querySelector(`[data-figure="${id}"] .fig-frame`));
  return small.slice(0, 5);
}"""


AXE_VERSION = "4.11.0"
AXE_SHA256 = "39bed7d72308f6d620789c169d699bfd7e8da80f65b545821a6b2215c3e83107"   # npm pack axe-core@4.11.0


@pytest.fixture(scope="module")
def axe_js() -> str:
    """axe-core's axe.min.js from its pinned npm package (kept in the download cache)."""
    import tarfile

    from builder import common
    from builder.common import check_hash, download

    tgz = common.CACHE / f"axe-core-{AXE_VERSION}.tgz"
    if not tgz.exists():
        download(common.CACHE, "npm", "pack", f"axe-core@{AXE_VERSION}", "--pack-destination", "{dir}", "--silent")
    check_hash(tgz.read_bytes(), AXE_SHA256, tgz.name)
    with tarfile.open(tgz) as tf:
        return tf.extractfile("package/axe.min.js").read().decode()


AXE_JS = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
  .filter(v => v.impact === 'serious' || v.impact === 'critical')
  .map(v => `${v.id} (${v.impact}): ${v.nodes.length} elements, e.g. ${v.nodes[0].target.join(' ')}: ${v.nodes[0].html.slice(0, 100)}`)"""


def axe_violations(page, axe_js: str) -> list[str]:
    page.wait_for_timeout(100)                     # the controls' names are given a frame after
    page.add_script_tag(content=axe_js)
    return page.evaluate(AXE_JS)


def test_axe_finds_no_serious_violation_on_the_other_pages(page, server, axe_js):
    """axe-core on every page that is not a chapter with figures (those: the phone test
    above) and on one figure page, live: no serious or critical violation. A failure names
    the rule, how many elements break it and the first of them."""
    chapters = {c["file"] for c in CHAPTERS}
    others = [n for n in PAGES if n not in chapters and not n.startswith("figure-")]
    figure_page = next(n for n in PAGES if n.startswith("figure-"))
    page.set_viewport_size({"width": 1100, "height": 900})
    found = {}
    for name in [*others, figure_page, "search.html?q=KV+cache"]:
        page.goto(server + name)
        figures = page.evaluate("() => [...document.querySelectorAll('figure.fig')].map(f => f.dataset.figure)")
        if figures:
            wait_states(page, figures, states=("live",), timeout_s=120)
        violations = axe_violations(page, axe_js)
        if violations:
            found[name] = violations
    assert len(others) >= 5 and found == {}, found


def test_in_dark_mode_the_page_and_its_figures_turn_dark_and_stay_readable(page, server, axe_js):
    """prefers-color-scheme: dark: a dark page, each figure drawn inverted (hues kept), and
    axe-core (colour contrast included) finds no serious or critical violation."""
    page.set_viewport_size({"width": 1024, "height": 800})
    page.emulate_media(color_scheme="dark")
    try:
        page.goto(server + "ch05-latency.html")
        figures = page.evaluate("() => [...document.querySelectorAll('figure.fig')].map(f => f.dataset.figure)")
        wait_states(page, figures, states=("live",), timeout_s=120)
        look = page.evaluate("""() => ({body: getComputedStyle(document.body).backgroundColor,
          filters: [...document.querySelectorAll('.fig-frame')].map(f => getComputedStyle(f).filter)})""")
        assert look["body"] == "rgb(20, 23, 28)", look
        assert look["filters"] and all(f.startswith("invert(0.92)") for f in look["filters"]), look
        assert axe_violations(page, axe_js) == []
    finally:
        page.emulate_media(color_scheme="light")


# The focused element, down through the shadow roots, and whether it is inside control
# `key` of figure `id` (the control's view carries the CSS class ctl-<key>).
FOCUSED_JS = """([id, key]) => {
  let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (!a) return {inside: false};
  let inside = false, fig = false;
  for (let n = a; n; n = n.parentNode || n.host) {
    if (n.classList && n.classList.contains(`ctl-${key}`)) inside = true;
    if (n.dataset && n.dataset.figure === id) fig = true;
  }
  const s = getComputedStyle(a);
  return {inside: inside && fig, tag: a.tagName, type: a.type || '', classes: String(a.className || ''),
          ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2};
}"""

# Focus the last element the keyboard reaches before figure `id` (where a reader's Tab
# into the figure begins).
BEFORE_FIGURE_JS = """(id) => {
  const fig = document.querySelector(`[data-figure="${id}"]`);
  const all = [...document.querySelectorAll('a[href], button, input, select, [tabindex="0"]')]
    .filter(el => fig.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_PRECEDING && el.checkVisibility());
  const el = all[all.length - 1];
  if (el) el.focus(); else document.activeElement?.blur();
}"""

def keyboard_move(page, fid: str, key: str, widget) -> None:
    """Tab to control `key` of figure `fid` and change it with the keys a reader would use:
    a menu's next option, a slider one step up, the next button of a group or a player, a
    checkbox or a button pressed. Asserts the control is reached and shows its focus."""
    import panel as pn

    page.evaluate(BEFORE_FIGURE_JS, fid)
    if isinstance(widget, pn.widgets.RadioButtonGroup):
        want = lambda f: f["tag"] == "BUTTON" and "bk-active" not in f["classes"]     # noqa: E731
    elif isinstance(widget, pn.widgets.Player):
        want = lambda f: f["tag"] == "BUTTON" and "next" in f["classes"].split()      # noqa: E731
    else:
        want = lambda f: True                                                          # noqa: E731
    for _ in range(150):
        page.keyboard.press("Tab")
        f = page.evaluate(FOCUSED_JS, [fid, key])
        if f["inside"] and want(f):
            break
    else:
        raise AssertionError(f"{fid}: Tab never reached control {key!r}")
    assert f["ring"], (fid, key, f)
    if f["tag"] == "SELECT":
        page.keyboard.press("ArrowDown")
    elif "noUi-handle" in f["classes"] or f["type"] == "range":
        page.keyboard.press("ArrowRight")
    elif f["type"] == "checkbox":
        page.keyboard.press("Space")
    elif f["type"] == "radio":
        page.keyboard.press("ArrowDown")
    else:
        page.keyboard.press("Enter")


def check_keyboard_moves(page, fid: str) -> None:
    """Every control of live figure `fid` reached with Tab, its focus ring visible, and
    changed with the keyboard; the figure then shows what CPython shows for the same values,
    and its text alternative (read by screen readers, politely) says it."""
    import panel as pn

    import widgets
    from builder.prerender import described_readouts, url_controls
    from tests.figures import COLLECT_JS, close, cpython_state

    view = widgets.build(fid)
    spec = url_controls(view)
    moved = []
    for key, widget in view.controls.items():
        if isinstance(widget, pn.widgets.Player) and widget.value >= widget.end:
            continue
        keyboard_move(page, fid, key, widget)
        moved.append(key)
        page.wait_for_timeout(300)
    # the values the controls took, read from the live models as a link writes them
    values = {key: page.evaluate("([id, key]) => window.__guide.linkValue(id, key)", [fid, key]) for key in spec}
    changes = []
    for key in [*moved, *(k for k in spec if k not in moved)]:
        if isinstance(view.controls[key], pn.widgets.Button):
            changes.append((key, None))
        elif values.get(key) is not None:
            changes.append((key, from_token(view.controls[key], spec[key], values[key])))
    expected = cpython_state(fid, changes)
    assert close(expected, cpython_state(fid)) != [], (fid, changes)     # the moves changed the figure
    deadline = page.evaluate("() => performance.now()") + 30_000
    while diffs := close(page.evaluate(COLLECT_JS, [fid, "live"]), expected):
        assert page.evaluate("() => performance.now()") < deadline, (fid, changes, diffs[:5])
        page.wait_for_timeout(200)
    page.wait_for_timeout(1000)                       # the text alternative follows 0.7 s after
    now = page.locator(f"#now-{fid}")
    assert now.get_attribute("aria-live") == "polite"
    said = now.text_content()
    for key in described_readouts(view):
        part = page.evaluate("(html) => window.__guide.readoutText(html)", expected["readouts"][key])
        assert part and part in said, (fid, key, part, said)


def from_token(widget, spec: dict, got):
    """A control's value in Python from its value as a link writes it (guide.js linkValue:
    a menu's token, a number, true/false), by the control's link spec."""
    from widgets.state import _options

    if spec["kind"] == "choice":
        return _options(widget)[spec["tokens"].index(got)]
    if spec["kind"] == "bool":
        return bool(got)
    return int(got) if spec["integer"] else float(got)
