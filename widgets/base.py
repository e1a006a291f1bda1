"""What every figure module returns, and the small helpers figures share.

A figure module (one per figure, e.g. widgets/ch04_batch_knee.py) defines

    FIGURE_ID = "ch04-batch-knee"
    TITLE = "..."
    COMPUTE = sim.batching.sweep_batch     # the one sim call behind the figure
    PARAMS = sim.batching.BatchSweepParams # its frozen Params; PARAMS() is the default state
    def build() -> FigureView

`build` creates the controls, makes ONE call into sim/ per update, and lays out a
Bokeh plot. The returned FigureView names the parts the page, the tests and the
static preview need:

- controls: key -> Panel widget. Each gets the CSS class "ctl-<key>", so the page can
  carry a reader's changes from the static preview into the live figure and tests
  can find it.
- sources: key -> Bokeh ColumnDataSource, named "src-<figure id>-<key>".
- readouts: key -> Panel HTML pane with the numbers shown beside the plot (CSS class
  "out-<key>").
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Callable

import panel as pn
from bokeh.core.property.vectorization import Field
from bokeh.models import ColumnDataSource, CustomJS, FixedTicker, GlyphRenderer, Legend, Plot
from bokeh.plotting import figure as bokeh_figure

# Palette (Okabe-Ito: distinguishable with common colour-vision deficiencies)
BLUE, ORANGE, GREEN, VERMILION, PURPLE, SKY, YELLOW, GREY = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#7f7f7f")

STAND_IN = "legend-stand-in"   # tag of a renderer drawn only as a legend swatch

# stylesheets that let a figure reflow when its box is narrower than its parts side by side
# (Bokeh writes a fixed part's width as its min-width too, inline: hence the !important)
REFLOW_ROW = ":host { flex-wrap: wrap; max-width: 100%; min-width: 0 !important; row-gap: 8px; }"
REFLOW_BOX = ":host { max-width: 100%; min-width: min(100%, 280px) !important; }"
REFLOW_TEXT = (":host { max-width: calc(100% - 20px); min-width: 0 !important; } "     # readouts' margins: 10 px a side
               ":host > div { max-width: 100%; min-width: 0 !important; } "
               # a folded table (details_table), read where guide.css does not reach
               "summary { cursor: pointer; } details.fig-details { max-width: 100%; overflow-x: auto; } "
               "table.fig-cells th, table.fig-cells td { text-align: left; vertical-align: top; "
               "padding: 2px 10px 2px 0; }")

# controls a finger can hit (WCAG 2.2 2.5.8: targets of 24 x 24 px at least) on a touch
# screen or a phone-width window: a slider's handle, a checkbox, a player's buttons
TOUCH = ("@media (pointer: coarse), (max-width: 600px) { "
         ":host { --handle-width: 24px; --handle-height: 28px; } "
         "input[type=checkbox], input[type=radio] { width: 24px; height: 24px; } "
         ".bk-btn, button { min-height: 32px; min-width: 32px; } input[type=range] { min-height: 24px; } }")

# the keyboard's focus, drawn the same way on every control (the page's own ring)
FOCUS = "*:focus-visible { outline: 3px solid #0072B2 !important; outline-offset: 1px; }"

CONTROL_WIDTH = 240    # px, the controls column
NARROWEST_PLOT = 280   # px, the width a plot may shrink to before it wraps under its neighbour
PLOT_WIDTH = 620       # px, a plot beside the controls
PLOT_HEIGHT = 340


@dataclass
class FigureView:
    """One figure: its layout and the named parts inside it."""

    figure_id: str
    layout: pn.viewable.Viewable
    controls: dict[str, pn.widgets.Widget] = field(default_factory=dict)
    sources: dict[str, ColumnDataSource] = field(default_factory=dict)
    readouts: dict[str, pn.pane.HTML] = field(default_factory=dict)
    plots: list[Any] = field(default_factory=list)      # Bokeh figures, in layout order

    def __post_init__(self) -> None:
        for key, widget in self.controls.items():
            widget.css_classes = [*widget.css_classes, f"ctl-{key}"]
        for widget in self.layout.select(pn.widgets.Widget):
            widget.stylesheets = [*widget.stylesheets, FOCUS, TOUCH]
        for key, source in self.sources.items():
            source.name = f"src-{self.figure_id}-{key}"
        for key, pane in self.readouts.items():
            pane.css_classes = [*pane.css_classes, f"out-{key}"]
        # narrow screens: a row wraps (controls above plots, plots under each other) and
        # no box is wider than the one it is in
        for box in self.layout.select(lambda o: isinstance(o, (pn.Row, pn.Column, pn.pane.HTML, pn.pane.Markdown))):
            box.stylesheets = [*box.stylesheets, REFLOW_ROW if isinstance(box, pn.Row) else
                               REFLOW_BOX if isinstance(box, pn.Column) else REFLOW_TEXT]
        for pane in self.layout.select(pn.pane.Bokeh):
            if isinstance(pane.object, Plot):
                static_legends(pane.object)
                plain_glyphs(pane.object)
                fit_width(pane)

    def __panel__(self) -> pn.viewable.Viewable:      # pn.panel(view), pn.Row(view, ...)
        return self.layout

    def _repr_mimebundle_(self, include=None, exclude=None):   # a notebook shows the layout
        if not pn.extension._loaded:
            pn.extension()
        return self.layout._repr_mimebundle_(include, exclude)


def fit_width(pane: pn.pane.Bokeh) -> None:
    """Let the plot in `pane` take the width it is given, up to the width it was drawn for.

    A plot keeps its height (its axis labels and legend keep their size: a phone gets a
    narrower plot, not a smaller one) and shrinks to NARROWEST_PLOT px before its row
    wraps it under its neighbour; on a wide screen it is the size it was designed at.
    """
    plot = pane.object
    width = plot.width or PLOT_WIDTH
    plot.update(sizing_mode="stretch_width", max_width=width, min_width=min(width, NARROWEST_PLOT))
    pane.param.update(sizing_mode="stretch_width", max_width=width, min_width=min(width, NARROWEST_PLOT))
    outside = [lg for lg in legends(plot) if lg.orientation == "horizontal" and lg not in plot.center]
    wrap = CustomJS(args=dict(plot=plot, legends=outside, height=plot.height), code=WRAP_JS)
    plot.js_on_change("inner_width", wrap)
    if plot.title is not None:
        plot.title.js_on_change("text", wrap)


# A plot narrower than its title or its row of legend entries (a phone) breaks the title
# into lines and lays the entries out in as many columns as fit, measured in the page's
# fonts (Bokeh draws both on its canvas, which clips what is wider than the plot), and
# grows by the rows the legend gains.
WRAP_JS = r"""
const width = plot.inner_width;
if (!(width > 0)) return;
const px = (size) => parseFloat(size) || 13;
const context = document.createElement('canvas').getContext('2d');
const measure = (text, style, size, font) => { context.font = `${style} ${size} ${font}`; return context.measureText(text).width; };
let extra = 0;                // px of height the title's and the legends' added lines take
const title = plot.title;
if (title && title.text) {
  const room = width - (plot.toolbar_location === 'above' ? 24 : 0);     // the toolbar's menu button
  const fits = (line) => measure(line, title.text_font_style, title.text_font_size, title.text_font) <= room;
  const lines = [];
  for (const word of title.text.replace(/\n/g, ' ').split(' ')) {
    const last = lines.length - 1;
    if (last >= 0 && fits(lines[last] + ' ' + word)) lines[last] += ' ' + word;
    else lines.push(word);
  }
  const text = lines.join('\n');
  if (text !== title.text) title.text = text;
  extra += Math.ceil((lines.length - 1) * 1.2 * px(title.text_font_size));
}
for (const legend of legends) {
  const sizes = legend.items.map((item) => legend.glyph_width + legend.label_standoff
    + measure(String(item.label?.value ?? ''), legend.label_text_font_style, legend.label_text_font_size, legend.label_text_font));
  const span = (k) => {        // the width of k columns, items placed row by row
    const cols = Array(k).fill(0);
    sizes.forEach((s, i) => { cols[i % k] = Math.max(cols[i % k], s); });
    return cols.reduce((a, b) => a + b, 0) + legend.spacing * (k - 1) + 2 * legend.padding + 2 * legend.margin;
  };
  let k = sizes.length;
  while (k > 1 && span(k) > width - 12) k -= 1;        // (12 px to spare: fonts measure a little short)
  const ncols = k === sizes.length ? 'auto' : k;
  if (ncols !== legend.ncols) legend.ncols = ncols;
  extra += (Math.ceil(sizes.length / k) - 1) * (Math.max(legend.glyph_height, px(legend.label_text_font_size)) + legend.spacing);
}
// (after BokehJS has made the title's new text, which it does asynchronously: a layout
// before that would measure the old one)
setTimeout(() => { if (plot.height !== height + extra) plot.height = height + extra; }, 0);
"""


def gpu_select(value: str = "H100-SXM", *, label: str = "GPU", width: int = CONTROL_WIDTH,
               names: list[str] | None = None) -> pn.widgets.Select:
    """The GPU menu every hardware figure uses: display names shown, catalogue keys as values (`names` narrows it)."""
    from sim import hardware

    return pn.widgets.Select(label=label, options={hardware.get(n).display_name: n for n in (names or hardware.names())},
                             value=value, width=width)


def model_select(value: str = "llama-3.1-8b", *, label: str = "Model", width: int = CONTROL_WIDTH,
                 names: list[str] | None = None) -> pn.widgets.Select:
    """The model menu: display names shown, catalogue keys as values (`names` narrows the list)."""
    from sim import models

    return pn.widgets.Select(label=label, options={models.get(n).display_name: n for n in (names or models.names())},
                             value=value, width=width)


def tokens_label(n: int) -> str:
    """1024 -> '1K', 1048576 -> '1M', 1536 -> '1,536'."""
    for unit, scale in (("M", 2 ** 20), ("K", 2 ** 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n:,}"


def fmt_ms(seconds: float, digits: int = 1) -> str:
    """A duration in milliseconds with thousands separators: fmt_ms(0.01234) == '12.3 ms'."""
    return f"{seconds * 1e3:,.{digits}f} ms"


def fmt_gib(n_bytes: float, digits: int = 1) -> str:
    """A byte count in GiB (2**30 bytes), the unit nvidia-smi and the allocators report."""
    return f"{n_bytes / 2 ** 30:,.{digits}f} GiB"


def plot(title: str, x_label: str, y_label: str, *, width: int = PLOT_WIDTH,
         height: int = PLOT_HEIGHT, x_type: str = "auto", y_type: str = "auto",
         **kw: Any):
    """A Bokeh figure with the guide's look: labelled axes, no toolbar clutter."""
    p = bokeh_figure(title=title, width=width, height=height, x_axis_type=x_type,
                     y_axis_type=y_type, x_axis_label=x_label, y_axis_label=y_label,
                     tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="above",
                     **kw)
    p.toolbar.logo = None
    p.toolbar.active_drag = None            # a finger drawn over a plot scrolls the page; pan is a tap away
    p.title.text_font_size = "13px"
    p.axis.axis_label_text_font_size = "12px"
    p.axis.axis_label_text_font_style = "normal"
    return p


def label_ticks(axes, labels: dict[int, str]) -> None:
    """Ticks at the keys of `labels` on each of `axes` (e.g. `p.xaxis`), shown as its values.

    A redraw sets the ticks of the axis's own FixedTicker, made on the first call: a new
    ticker model would make Bokeh walk every model of the document to register it (60-80
    ms in CPython for a figure of 150 models, on every move of a control).
    """
    for axis in axes:
        if isinstance(axis.ticker, FixedTicker):
            axis.ticker.ticks = list(labels)
        else:
            axis.ticker = FixedTicker(ticks=list(labels))
        axis.major_label_overrides = dict(labels)


class Readout(pn.pane.HTML):
    """An HTML pane whose new text sets only its model's text.

    Panel's HTML pane, on every change of its object, works out each property of its
    model again (the theme's stylesheets too, making a new stylesheet model each time)
    and sets them all, though only the text changed: about 1 ms per change in CPython,
    several in the browser's Python, for figures that change a few readouts per move.
    """

    def _update(self, ref: str, model) -> None:
        model.update(**self._process_param_change({"object": self.object}))


def readout(text: str = "", width: int = CONTROL_WIDTH) -> Readout:
    """An HTML pane for numbers shown next to a plot."""
    return Readout(text, width=width, margin=(4, 10), css_classes=["fig-readout"])


def rows_table(rows: list[tuple[str, str]]) -> str:
    """A two-column table of (label, value) rows, for readouts."""
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="fig-numbers">{body}</table>'


def details_table(summary: str, header: tuple, rows: list) -> str:
    """A table folded under one line (an HTML <details>): what a plot tells only on hover, for
    a keyboard, a screen reader or a touch screen. Cells are text (escaped); no rows, no table."""
    if not rows:
        return ""
    head = "".join(f'<th scope="col">{html.escape(h)}</th>' for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<details class="fig-details"><summary>{html.escape(summary)}</summary>'
            f'<table class="fig-cells"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details>')


def provenance(note: str) -> str:
    """The line under a figure that says where its numbers come from."""
    return f'<p class="fig-provenance">{note}</p>'


def watch(widgets: list[pn.widgets.Widget], callback: Callable[[], None],
          param: str = "value") -> None:
    """Call `callback()` whenever any of the widgets' `param` changes."""
    for w in widgets:
        w.param.watch(lambda _event: callback(), param)


def stepper(n_steps: int, label: str = "Step", interval_ms: int = 900,
            width: int = CONTROL_WIDTH, start: int = 0) -> pn.widgets.Player:
    """Reset / back / play / pause / step / last controls over steps start..start+n_steps-1.

    A Panel Player: its buttons run in the page, and every step change reaches the
    figure's Python like any other control ("first" is the reset button).
    """
    if n_steps < 1:
        raise ValueError(f"a stepper needs at least one step, got {n_steps}")
    return pn.widgets.Player(label=label, start=start, end=start + n_steps - 1, value=start, interval=interval_ms,
                             loop_policy="once", show_loop_controls=False, show_value=True,
                             visible_buttons=["first", "previous", "pause", "play", "next", "last"],
                             width=width)


def legend_glyph(p, glyph: str, **style: Any):
    """An undrawn glyph (one NaN point) whose only job is a legend entry with a fixed style.

    Bokeh draws a legend swatch only for renderers with data, so a legend entry for a
    colour that the plot takes from its data, or for an annotation such as a Span, needs
    a stand-in renderer.
    """
    nan = float("nan")
    if glyph in ("rect", "quad"):
        r = p.quad(left=[nan], right=[nan], bottom=[nan], top=[nan], **style)
    else:
        r = getattr(p, glyph)(x=[nan], y=[nan], **style)
    r.tags, r.visible = [STAND_IN], False
    return r


def legends(plot) -> list:
    """The Legends of Bokeh figure `plot`, inside it and in its side panels."""
    return [a for a in plot.center + plot.above + plot.below + plot.left + plot.right if isinstance(a, Legend)]


def static_legends(plot) -> None:
    """Point the legend entries of Bokeh figure `plot` at stand-ins: hidden renderers of
    the same glyph with the same style, over one row of NaN (a legend draws the swatch of
    a hidden renderer all the same).

    BokehJS re-renders a legend, and reads the page's layout to place it again
    (getBoundingClientRect), whenever anything its entries reference changes, down to
    the data source of each renderer. With the renderers that draw the data, every redraw
    of a figure cost the page 10-30 ms per legend; the swatch needs the style alone.
    An entry that takes a colour (or any other style) from the data keeps its renderer.
    """
    source = ColumnDataSource(data={})            # one for the plot's stand-ins
    columns: dict[str, list[float]] = {}
    for legend in legends(plot):
        for item in legend.items:
            item.renderers = [legend_stand_in(plot, r, source, columns) for r in item.renderers]
    source.data = columns


def legend_stand_in(plot, renderer, source, columns: dict):
    """A hidden copy of `renderer` (a GlyphRenderer of `plot`) over `source`, whose columns
    it adds to `columns` (one NaN each); the renderer itself where its glyph takes more than
    coordinates from the data, or where it is a stand-in already."""
    if not isinstance(renderer, GlyphRenderer) or STAND_IN in renderer.tags:
        return renderer
    specs = renderer.glyph.properties_with_values(include_defaults=False)
    fields = {name: v.field for name, v in specs.items() if isinstance(v, Field)}
    coordinates = set(renderer.glyph._args) - {"size", "radius", "angle", "marker", "text"}
    if not set(fields) <= coordinates:
        return renderer
    columns.update({col: [float("nan")] for col in fields.values()})
    glyph = renderer.glyph        # (its clone() would wrap plain values, a colour in a Value)
    copy = type(glyph)(**{name: getattr(glyph, name) for name in specs})
    stand_in = GlyphRenderer(data_source=source, glyph=copy, visible=False, tags=[STAND_IN])
    plot.renderers.append(stand_in)
    return stand_in


UNUSED_GLYPHS = ("selection_glyph", "nonselection_glyph", "muted_glyph")


def plain_glyphs(plot) -> None:
    """No selected, unselected or muted look for the renderers of Bokeh figure `plot`.

    Bokeh's plotting API gives each renderer a glyph for each of those looks (or "auto",
    a copy made in the page), and BokehJS builds a view of each (its visual properties
    each looked up as a CSS variable of the page), for the looks a renderer takes when
    part of its data is selected or when a legend mutes it. The guide's plots have no
    selection tool and no muting legend (tests/test_figure_api.py checks it), so those
    looks are never drawn. Without them BokehJS drew ch04's previews 0.12-0.17 s sooner
    in two runs (the first left out the "auto" looks only), ch09's 0.16 s sooner in one
    and as soon in the other (tests/bench_previews.py, variant plain-glyphs; BENCHMARKS.md,
    The last changes).
    """
    for r in plot.renderers:
        if isinstance(r, GlyphRenderer):
            for name in UNUSED_GLYPHS:
                setattr(r, name, None)


def inset_legend(p, items: list[tuple[str, Any]], location: str = "top_right") -> None:
    """A small legend inside plot `p`: (label, renderer) pairs."""
    from bokeh.models import Legend, LegendItem

    p.add_layout(Legend(items=[LegendItem(label=label, renderers=[r]) for label, r in items], location=location,
                        label_text_font_size="10px", background_fill_alpha=0.7, padding=2, margin=4, spacing=0),
                 "center")
