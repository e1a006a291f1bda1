"""One module per figure: controls -> one sim call -> a Bokeh/Panel view.

A figure's module is named after its id: figure "ch04-batch-knee" lives in
widgets/ch04_batch_knee.py. `FIGURES` maps every id to its module name (found by
listing this package, without importing anything); `build(figure_id)` imports the
module and returns its FigureView, so a page pays only for the figures it shows.

Each module is the one place its figure is declared: FIGURE_ID, TITLE, COMPUTE (the sim
function behind it), PARAMS (COMPUTE's frozen Params dataclass; PARAMS() is the default
state) and build(). `sim_call(figure_id)` names that call as "module.function" strings,
for code that must run the sims without importing Panel (tests in Pyodide or Python 3.11).
"""
from __future__ import annotations

import importlib
import pkgutil
import re

FIGURES: dict[str, str] = {
    m.name.replace("_", "-"): f"{__name__}.{m.name}"
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
    if re.fullmatch(r"ch\d\d_[a-z0-9_]+", m.name)
}


def module(figure_id: str):
    """The module that defines `figure_id`; ValueError lists the valid ids."""
    try:
        name = FIGURES[figure_id]
    except KeyError:
        raise ValueError(f"unknown figure {figure_id!r}; valid ids: {', '.join(FIGURES)}") from None
    mod = importlib.import_module(name)
    if getattr(mod, "FIGURE_ID", None) != figure_id:
        raise ValueError(f"{name} must set FIGURE_ID = {figure_id!r}")
    return mod


def build(figure_id: str):
    """Build the figure `figure_id` and return its FigureView."""
    view = module(figure_id).build()
    if view.figure_id != figure_id:
        raise ValueError(f"{FIGURES[figure_id]}.build() returned figure {view.figure_id!r}")
    return view


def dotted(obj) -> str:
    """A function or class as "module.name", e.g. "sim.kv.kv_size"."""
    return f"{obj.__module__}.{obj.__qualname__}"


def sim_call(figure_id: str) -> tuple[str, str]:
    """("module.function", "module.Params") of the sim call behind `figure_id` (its COMPUTE and PARAMS)."""
    mod = module(figure_id)
    missing = [n for n in ("COMPUTE", "PARAMS") if not hasattr(mod, n)]
    if missing:
        raise ValueError(f"{mod.__name__} must define {' and '.join(missing)} (the sim call behind the figure)")
    return dotted(mod.COMPUTE), dotted(mod.PARAMS)


def states(figure_id: str) -> dict:
    """The named states figure `figure_id` declares: name -> {control key: value} ({} if none)."""
    from widgets.state import named_states

    return named_states(module(figure_id))


def figure(figure_id: str, state: str | None = None, **values):
    """The figure `figure_id` with its controls set: a named state (see `states`) and/or
    control values by key, e.g. figure("ch04-batch-knee", gpu="H200", batch=64). Each value
    is checked against its control (ValueError names the figure, key and valid values).
    The FigureView it returns displays itself in a notebook."""
    from widgets.state import apply_state, state_values

    return apply_state(build(figure_id), **state_values(module(figure_id), figure_id, state, values))
