"""Every reader: a page never scrolls sideways at phone, tablet, projector and desktop widths
(a wide table or figure scrolls inside its own box), the keyboard's focus is visible, and a
chapter prints with its figures' posters and no controls."""
from __future__ import annotations

import re

import pytest

from tests.browser import wait_states
from tests.conftest import SITE, built_chapters

pytestmark = pytest.mark.browser

WIDTHS = (360, 390, 768, 1024, 1440)
PAGES = sorted(p.name for p in SITE.glob("*.html")) if SITE.is_dir() else []

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


@pytest.fixture(scope="module")
def page(chromium):
    p = chromium.new_page()
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
    page = text_page
    page.set_viewport_size({"width": width, "height": 844})
    bad = {}
    for name in PAGES:
        page.goto(server + name, wait_until="load")
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
  const controls = [], plots = [];
  (function walk(v) {
    if (!v || !v.el || typeof v.el.getBoundingClientRect !== 'function') return;
    const t = v.model.type, r = v.el.getBoundingClientRect();
    if (t === 'Figure' || t === 'Plot') { plots.push({top: r.top, width: Math.max(r.width, v.model.width || 0)}); return; }
    if (/Select|Slider|RadioButtonGroup|Toggle|Checkbox|Button/.test(t) && r.width > 0) controls.push(r);
    for (const c of (v.children ? v.children() : [])) walk(c);
  })(root);
  const frameBox = frame.getBoundingClientRect();
  return {scroll: frame.scrollWidth, client: frame.clientWidth, right: Math.round(frameBox.right),
          widestPlot: Math.max(0, ...plots.map(r => r.width)),
          // the first control (the controls come first in every figure) above the first plot
          stacked: !controls.length || !plots.length || Math.min(...plots.map(r => r.top)) >= controls[0].bottom - 1};
}"""


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c["file"] for c in CHAPTERS])
def test_on_a_phone_a_figure_puts_its_controls_above_its_plots(page, server, chapter, axe_js):
    """At 390 px a figure reflows: its controls stack above its plots, and it is no wider
    than its box unless one of its plots alone is (a plot keeps its size and scrolls in
    the figure's box: plots that take the width they are given are still to come). And
    axe-core finds no serious or critical violation on the page, its figures live."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server + chapter["file"])
    wait_states(page, chapter["figures"], states=("live",), timeout_s=120)
    for fid in chapter["figures"]:
        got = page.evaluate(REFLOW_JS, fid)
        assert got["stacked"], (fid, got)
        assert got["right"] <= 390 and (got["scroll"] <= got["client"] + 1 or got["widestPlot"] > got["client"]), (fid, got)
    assert axe_violations(page, axe_js) == []


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
