"""The sim call behind every golden snapshot: id -> FigureSim(compute, params).

Figures with a widget take it from the widget module (COMPUTE, PARAMS, via
widgets.sim_call); the rest from tests/planned_figures.py. `CALLS` holds the calls as
"module.name" strings, so a Python without Panel (Pyodide, the 3.11 trace environment)
can run them: `resolve` turns a string back into the object.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import widgets
from tests.planned_figures import PLANNED, TEXT_SIMS


def resolve(dotted: str):
    """The object a "module.name" string names."""
    mod, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(mod), name)


CALLS: dict[str, tuple[str, str]] = {
    **{fid: widgets.sim_call(fid) for fid in widgets.FIGURES}, **PLANNED, **TEXT_SIMS}


@dataclass(frozen=True)
class FigureSim:
    """The simulation behind one golden snapshot."""

    compute: Callable          # compute(params) -> result dataclass
    params: type               # params() -> the default state (a frozen dataclass)


FIGURES: dict[str, FigureSim] = {fid: FigureSim(resolve(c), resolve(p)) for fid, (c, p) in sorted(CALLS.items())}
