"""Figures from Python: widgets.figure (notebooks), named states, and the checks on control values."""
from __future__ import annotations

import re
import types

import panel as pn
import pytest

import widgets
from sim.batching import BatchSweepParams, sweep_batch
from widgets.app import parse
from widgets.state import apply_state, named_states, parse_value

STATES = [(fid, None) for fid in widgets.FIGURES] + [
    (fid, name) for fid in widgets.FIGURES for name in widgets.states(fid)]


@pytest.mark.parametrize("figure_id,state", STATES, ids=[f"{f}-{s or 'default'}" for f, s in STATES])
def test_every_figure_builds_in_every_named_state(figure_id, state):
    view = widgets.figure(figure_id, state)
    want = widgets.states(figure_id).get(state, {})      # (a preset control may move others too)
    assert {k: view.controls[k].value for k in want} == want
    if state is None:
        assert {k: w.value for k, w in view.controls.items()} == {
            k: w.value for k, w in widgets.build(figure_id).controls.items()}
    assert pn.panel(view) is view.layout          # what a notebook cell shows


def test_states_are_declared_one_to_three_per_figure_with_slug_names():
    for fid in widgets.FIGURES:
        states = widgets.states(fid)
        assert 1 <= len(states) <= 3, fid
        assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) for name in states), fid


def test_states_are_optional():
    assert named_states(types.ModuleType("widgets.ch99_none")) == {}
    with pytest.raises(ValueError, match="STATES must map"):
        named_states(types.SimpleNamespace(__name__="widgets.ch99_bad", STATES={"a": 1}))


def test_a_state_shows_what_the_sim_computes_for_it():
    r = sweep_batch(BatchSweepParams(gpu="H200", batch=64))
    default = widgets.figure("ch04-batch-knee").readouts["numbers"].object
    shown = widgets.figure("ch04-batch-knee", "h200-batch-64").readouts["numbers"].object
    assert f"{r.step_time_s_at_batch * 1e3:.2f} ms" in shown
    assert f"{r.tokens_per_s_total_at_batch:,.0f} tokens/s" in shown
    assert shown != default
    # values given by key override the named state's
    view = widgets.figure("ch04-batch-knee", "h200-batch-64", batch=128)
    assert (view.controls["gpu"].value, view.controls["batch"].value) == ("H200", 128)


@pytest.mark.parametrize("values,message", [
    ({"batch": 0}, "batch=0 is not valid (out of range); batch accepts an integer from 1 to 1024"),
    ({"batch": 1025}, "batch=1025 is not valid (out of range)"),
    ({"batch": 2.5}, "batch=2.5 is not valid; batch accepts an integer from 1 to 1024"),
    ({"batch": True}, "batch=True is not valid"),
    ({"batch": "64"}, "batch='64' is not valid"),
    ({"gpu": "H300"}, "gpu='H300' is not valid; gpu accepts one of 'H100-SXM', 'H200'"),
    ({"context": 1000}, "context=1000 is not valid; context accepts one of 256, 2048, 8192, 32768"),
    ({"gpus": "H200"}, "figure ch04-batch-knee has no control 'gpus'; its controls are batch, gpu, model, context"),
])
def test_bad_values_name_the_figure_key_and_valid_values(values, message):
    view = widgets.figure("ch04-batch-knee")
    before = view.readouts["numbers"].object
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        apply_state(view, gpu="H200", **values) if "gpu" not in values else apply_state(view, **values)
    assert str(err.value).startswith("figure ch04-batch-knee")
    # nothing was set: every value is checked before any control moves
    assert view.controls["gpu"].value == "H100-SXM" and view.readouts["numbers"].object == before


def test_float_sliders_toggles_and_option_types():
    with pytest.raises(ValueError, match=r"temperature=2\.5 is not valid \(out of range\); temperature accepts "
                                         r"a number from 0\.0 to 2\.0 in steps of 0\.05"):
        widgets.figure("ch01-pipeline", temperature=2.5)
    with pytest.raises(ValueError, match=r"between the slider's steps"):
        widgets.figure("ch01-pipeline", temperature=0.33)
    assert widgets.figure("ch01-pipeline", temperature=0.35).controls["temperature"].value == 0.35
    with pytest.raises(ValueError, match=r"long_prompt=1 is not valid; long_prompt accepts True or False"):
        widgets.figure("ch04-scheduler", long_prompt=1)
    with pytest.raises(ValueError, match=r"cache=1 is not valid; cache accepts one of True, False"):
        widgets.figure("ch00-decode-meter", cache=1)
    # an int where the options are floats is the same number
    assert widgets.figure("ch04-scheduler", timeout=0).controls["timeout"].value == 0.0


def test_unknown_figure_and_state():
    with pytest.raises(ValueError, match="unknown figure 'ch04-nope'; valid ids: ch00-decode-meter"):
        widgets.figure("ch04-nope")
    with pytest.raises(ValueError, match="figure ch04-batch-knee has no named state 'h300'; its states are: batch-64"):
        widgets.figure("ch04-batch-knee", "h300")


def test_command_line_and_url_values():
    assert [parse_value(t) for t in ("64", "0.5", "true", "H200", "llama-3.1-8b")] == [64, 0.5, True, "H200",
                                                                                          "llama-3.1-8b"]
    assert parse(["ch04-batch-knee", "h200-batch-64", "batch=128", "gpu=B200"]) == (
        "ch04-batch-knee", "h200-batch-64", {"batch": 128, "gpu": "B200"})
    assert parse(["ch04-batch-knee", "batch=8"]) == ("ch04-batch-knee", None, {"batch": 8})


def test_notebook_display():
    pytest.importorskip("IPython")
    bundle = widgets.figure("ch04-batch-knee", batch=64)._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "text/html" in data and "application/vnd.holoviews_exec.v0+json" in data   # Panel's notebook output


@pytest.mark.parametrize("figure_id", sorted(widgets.FIGURES))
def test_a_control_move_changes_properties_not_the_models(figure_id):
    """A redraw sets properties of the models the page already has. A new Bokeh model (a
    ticker made from a list, a fresh renderer) makes Bokeh walk every model of the document
    to register it: 60-80 ms of CPython on each move in the parallelism figure, before the
    browser's slower Python."""
    from bokeh.document import Document

    from tests.figures import alternate_value, apply_change

    view = widgets.build(figure_id)
    doc = Document()
    doc.add_root(view.layout.get_root(doc))
    ids = {m.id for m in doc.models}
    for key, widget in view.controls.items():
        apply_change(view, key, alternate_value(widget))
        now = {m.id for m in doc.models}
        assert now == ids, (f"moving {key} added {len(now - ids)} and dropped {len(ids - now)} models: "
                            f"{sorted(type(m).__name__ for m in doc.models if m.id in now - ids)}")


def test_a_readout_change_sets_its_text_and_nothing_else(monkeypatch):
    """A readout's new text reaches its model as Panel's HTML pane would write it, as the
    one change, and without making the pane's stylesheet models again."""
    import panel.reactive
    from bokeh.document import Document

    from widgets.base import Readout, readout

    made = []

    class Counted(panel.reactive.ImportedStyleSheet):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("url"))
            super().__init__(*args, **kwargs)

    text = '<table class="fig-numbers"><tr><th>a & b</th><td>1,024 "tokens"</td></tr></table>'
    pane = readout("<p>before</p>")
    assert isinstance(pane, Readout) and isinstance(pane, pn.pane.HTML)
    doc = Document()
    model = pane.get_root(doc)
    doc.add_root(model)
    changes = []
    doc.on_change(lambda event: changes.append((type(event).__name__, getattr(event, "attr", None))))
    monkeypatch.setattr(panel.reactive, "ImportedStyleSheet", Counted)
    pane.object = text
    assert changes == [("ModelChangedEvent", "text")] and made == []
    assert model.text == pn.pane.HTML(text).get_root(Document()).text     # escaped as Panel escapes it
    assert "&amp;" in model.text and "&lt;table" in model.text


@pytest.mark.parametrize("figure_id", sorted(widgets.FIGURES))
def test_a_control_move_changes_nothing_a_legend_refers_to(figure_id):
    """BokehJS re-renders a legend, and reads the page's layout again to place it, whenever
    a model its entries refer to changes, down to each renderer's data source: 10-30 ms of
    the page's main thread per legend and redraw. The entries refer to undrawn stand-ins
    (widgets.base.static_legends), except where a swatch takes its style from the data."""
    from bokeh.document import Document
    from bokeh.models import Legend

    from tests.figures import alternate_value, apply_change
    from widgets.base import STAND_IN

    view = widgets.build(figure_id)
    doc = Document()
    root = view.layout.get_root(doc)
    doc.add_root(root)
    watched = set()
    for legend in root.select({"type": Legend}):
        for item in legend.items:
            for r in item.renderers:
                if STAND_IN in r.tags:
                    watched |= {m.id for m in r.references()}
                    assert all(all(v != v for v in col) for col in r.data_source.data.values())   # NaN only
                else:
                    assert (figure_id, r.glyph.__class__.__name__) in STYLED_FROM_DATA, \
                        f"{figure_id}: legend entry {item.label} draws from a renderer of the data"
    changed = []
    doc.on_change(lambda event: changed.append(event) if getattr(event, "model", None) is not None
                  and event.model.id in watched else None)
    for key, widget in view.controls.items():
        apply_change(view, key, alternate_value(widget))
    assert not changed, [f"{type(e.model).__name__}.{getattr(e, 'attr', '')}" for e in changed]


@pytest.mark.parametrize("figure_id", sorted(widgets.FIGURES))
def test_no_plot_can_select_or_mute_so_no_renderer_has_those_looks(figure_id):
    """The renderers have no selected, unselected or muted look (widgets.base.plain_glyphs:
    BokehJS builds three glyph views fewer per renderer). That hides nothing only while no
    plot has a selection tool, no legend mutes a renderer and none is muted: checked here,
    after every control was moved (a renderer added on a move is checked too)."""
    from bokeh.document import Document
    from bokeh.models import GlyphRenderer, Legend, Plot
    from bokeh.models.tools import SelectTool

    from tests.figures import alternate_value, apply_change
    from widgets.base import UNUSED_GLYPHS

    view = widgets.build(figure_id)
    for key, widget in view.controls.items():
        apply_change(view, key, alternate_value(widget))
    root = view.layout.get_root(Document())
    plots = list(root.select({"type": Plot}))
    assert plots
    for p in plots:
        assert not [t for t in p.toolbar.tools if isinstance(t, SelectTool)], p.title.text
    assert all(legend.click_policy != "mute" for legend in root.select({"type": Legend}))
    renderers = list(root.select({"type": GlyphRenderer}))
    assert renderers and not [r for r in renderers if r.muted]
    assert {(name, getattr(r, name)) for r in renderers for name in UNUSED_GLYPHS} == \
        {(name, None) for name in UNUSED_GLYPHS}


STYLED_FROM_DATA = {("ch01-pipeline", "VBar"), ("ch14-model-vs-measured", "Scatter")}   # colour by token / by run


def test_a_legend_stand_in_has_its_renderers_style_and_draws_nothing():
    from bokeh.models import ColumnDataSource, Legend, LegendItem
    from bokeh.plotting import figure

    from widgets.base import STAND_IN, legend_stand_in, static_legends

    p = figure()
    src = ColumnDataSource({"x": [1, 2], "y": [3, 4], "c": ["red", "blue"]})
    line = p.line("x", "y", source=src, line_color="#0072B2", line_dash="dashed", line_width=3)
    bars = p.vbar(x="x", top="y", width=0.5, fill_color="c", source=src)
    dots = p.scatter("x", "y", source=src, marker="square")
    p.add_layout(Legend(items=[LegendItem(label="line", renderers=[line]), LegendItem(label="bars", renderers=[bars]),
                               LegendItem(label="dots", renderers=[dots])]))
    static_legends(p)
    (stand_in,), (kept,), (dots_in,) = (item.renderers for item in p.legend[0].items)
    assert kept is bars                                    # its colour comes from the data
    assert stand_in is not line and STAND_IN in stand_in.tags and stand_in in p.renderers and not stand_in.visible
    assert (stand_in.glyph.line_color, stand_in.glyph.line_dash, stand_in.glyph.line_width) == ("#0072B2", [6], 3)
    assert dots_in.data_source is stand_in.data_source     # one NaN row for the plot's stand-ins
    assert dots_in.glyph.marker == dots.glyph.marker == "square"     # plain values, as on the original
    data = stand_in.data_source.data
    assert sorted(data) == ["x", "y"] and all(len(v) == 1 and v[0] != v[0] for v in data.values())
    assert legend_stand_in(p, stand_in, stand_in.data_source, {}) is stand_in   # a second pass leaves it


@pytest.mark.parametrize("kw", [{}, {"max_batch": 16, "add_long_prompt": True, "chunked_prefill": True},
                                {"max_batch": 2, "batch_timeout_s": 0.0}])
def test_scheduler_timeline_bars_cover_every_step_of_every_slot_once(kw):
    # ch04-scheduler draws a bar per run of steps of one slot, not a cell per step: the bars
    # must tile the (step, slot) grid exactly, each with the cells' kind and request
    import numpy as np

    from sim.scheduler import SchedulerParams, compare_schedules
    from widgets.ch04_scheduler import _runs

    c = compare_schedules(SchedulerParams(**kw))
    for r in (c.static, c.continuous):
        slot, first, last, code, req = _runs(r)
        kind = np.full(r.slot_kind.shape, -1)
        request = np.full(r.slot_kind.shape, -9)
        for s, a, b, k, q in zip(slot, first, last, code, req):
            assert a <= b and (kind[a:b + 1, s] == -1).all()                          # no overlap
            assert np.array_equal(r.step_start_s[a + 1:b + 1], r.step_end_s[a:b])     # back to back
            kind[a:b + 1, s], request[a:b + 1, s] = k, q
        assert np.array_equal(kind, r.slot_kind) and np.array_equal(request, r.slot_request)
        assert len(slot) < r.slot_kind.size / 5                                          # far fewer bars


@pytest.mark.parametrize("figure_id", sorted(widgets.FIGURES))
def test_what_a_plot_tells_on_hover_is_also_in_a_table(figure_id):
    """A hover reaches neither a keyboard, a screen reader nor a touch screen: a figure whose
    plots have a hover tool also folds what it shows into a table (widgets.base.details_table)."""
    from bokeh.models import HoverTool

    view = widgets.build(figure_id)
    hovers = [t for p in view.plots for t in p.toolbar.tools if isinstance(t, HoverTool)]
    tables = [k for k, r in view.readouts.items() if '<details class="fig-details">' in r.object]
    if hovers:
        assert tables, f"{figure_id}: a hover tool and no folded table"
        assert all(k.endswith("_note") for k in tables), "a folded table is not read out with the figure's numbers"
