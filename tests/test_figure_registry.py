"""One registry of figures: each widget module declares its sim call (COMPUTE, PARAMS), and
every golden snapshot belongs to a widget or to an entry of tests/planned_figures.py.

Adding a figure's widget means: the module (with COMPUTE and PARAMS), and removing its id
from PLANNED; these tests fail until both are done.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest

import widgets
from tests.figure_sims import CALLS, FIGURES, resolve
from tests.planned_figures import PLANNED, TEXT_SIMS
from tests.test_golden import GOLDEN, differences, snapshot

NAMED = sorted(widgets.FIGURES)


def test_every_golden_file_has_a_widget_or_a_listed_sim_and_lists_do_not_overlap():
    files = {p.stem for p in GOLDEN.glob("*.json")}
    have = set(widgets.FIGURES)
    assert sorted(files - have - set(PLANNED) - set(TEXT_SIMS)) == [], "golden files of no widget and no entry"
    assert sorted(set(PLANNED) & have) == [], "these have a widget now: remove them from PLANNED"
    assert sorted(set(TEXT_SIMS) & have) == [], "a text sim shares its id with a widget"
    assert sorted(set(PLANNED) & set(TEXT_SIMS)) == []


@pytest.mark.parametrize("figure", sorted({**PLANNED, **TEXT_SIMS}))
def test_listed_names_resolve_to_a_sim_function_and_its_params(figure):
    compute, params = {**PLANNED, **TEXT_SIMS}[figure]
    assert compute.startswith("sim.") and params.startswith("sim.")
    assert callable(resolve(compute)) and dataclasses.is_dataclass(resolve(params))


@pytest.mark.parametrize("figure", NAMED)
def test_widget_declares_compute_and_frozen_params(figure):
    mod = widgets.module(figure)
    assert isinstance(mod.TITLE, str) and mod.TITLE
    assert mod.COMPUTE.__module__.startswith("sim."), f"{figure}: COMPUTE must be a sim function"
    assert isinstance(mod.PARAMS, type) and dataclasses.is_dataclass(mod.PARAMS), f"{figure}: PARAMS is a class"
    assert mod.PARAMS.__dataclass_params__.frozen, f"{figure}: PARAMS must be frozen"
    assert dataclasses.is_dataclass(mod.COMPUTE(mod.PARAMS()))
    assert CALLS[figure] == widgets.sim_call(figure) == (f"{mod.COMPUTE.__module__}.{mod.COMPUTE.__name__}",
                                                         f"{mod.PARAMS.__module__}.{mod.PARAMS.__name__}")


def test_sim_call_names_a_missing_declaration(monkeypatch):
    with pytest.raises(ValueError, match="unknown figure 'ch99-nothing'"):
        widgets.sim_call("ch99-nothing")
    bare = types.ModuleType("widgets.ch99_bare")      # a figure module that forgot its sim call
    bare.FIGURE_ID = "ch99-bare"
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    monkeypatch.setitem(widgets.FIGURES, bare.FIGURE_ID, bare.__name__)
    with pytest.raises(ValueError, match="widgets.ch99_bare must define COMPUTE and PARAMS"):
        widgets.sim_call("ch99-bare")


@pytest.mark.parametrize("figure", NAMED)
def test_first_update_is_compute_of_default_params(figure, monkeypatch):
    """build() calls COMPUTE once, and what it draws first is COMPUTE(PARAMS()): the result of
    that call equals the golden snapshot of the default state (its Params may spell the same
    state differently, e.g. a preset's lengths given explicitly)."""
    mod = widgets.module(figure)
    compute = mod.COMPUTE
    calls = []

    def spy(params=None, *args, **kw):
        calls.append(params)
        result = compute(params, *args, **kw)
        calls.append(result)
        return result

    sim_mod = __import__(compute.__module__, fromlist=["_"])
    monkeypatch.setattr(sim_mod, compute.__name__, spy)       # calls through the sim module
    for name, obj in vars(mod).items():                          # calls through a name the widget imported
        if obj is compute:
            monkeypatch.setattr(mod, name, spy)
    view = mod.build()
    assert view.figure_id == figure
    assert calls, f"{figure}: build() never called {compute.__name__}"
    golden = json.loads((GOLDEN / f"{figure}.json").read_text())
    assert differences(golden, snapshot(calls[1])) == [], f"{figure}: the first update is not COMPUTE(PARAMS())"
    assert len(calls) == 2, f"{figure}: build() called {compute.__name__} {len(calls) // 2} times, expected once"


def test_figures_cover_every_golden_file():
    assert sorted(FIGURES) == sorted(p.stem for p in Path(GOLDEN).glob("*.json"))
