"""Every figure's simulation: one call, plot-ready fields, deterministic.

(Their speed is measured by tests/bench_sims.py, which prints timings; it is not asserted here.)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.figure_sims import FIGURES

PLAIN = (int, float, str, bool, type(None), np.ndarray, np.integer, np.floating, np.bool_)


def _plot_ready(value, depth=0) -> bool:
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plot_ready(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _plot_ready(v, depth + 1) for k, v in value.items())
    if dataclasses.is_dataclass(value) and depth < 3:
        return all(_plot_ready(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return False


@pytest.mark.parametrize("figure", sorted(FIGURES))
def test_figure_returns_a_plot_ready_result(figure):
    sim = FIGURES[figure]
    params = sim.params()
    if dataclasses.is_dataclass(params):
        assert type(params).__dataclass_params__.frozen, "inputs are frozen dataclasses"
    result = sim.compute(params)
    assert dataclasses.is_dataclass(result)
    for f in dataclasses.fields(result):
        assert _plot_ready(getattr(result, f.name)), f"{figure}: field {f.name} is not plot-ready"


def test_figures_are_deterministic():
    for name, sim in FIGURES.items():
        a, b = sim.compute(sim.params()), sim.compute(sim.params())
        assert repr(a) == repr(b), name
