"""One module per figure: controls -> one sim call -> a Bokeh/Panel view.

`FIGURES` maps each figure id to its module; `build(figure_id)` imports the module
and returns its FigureView. Modules are imported lazily, so a page pays only for
the figures it shows.
"""
from __future__ import annotations

import importlib

FIGURES: dict[str, str] = {
    "ch04-batch-knee": "widgets.ch04_batch_knee",
}


def module(figure_id: str):
    """The module that defines `figure_id`; ValueError lists the valid ids."""
    try:
        name = FIGURES[figure_id]
    except KeyError:
        raise ValueError(f"unknown figure {figure_id!r}; valid ids: {', '.join(FIGURES)}") from None
    return importlib.import_module(name)


def build(figure_id: str):
    """Build the figure `figure_id` and return its FigureView."""
    view = module(figure_id).build()
    if view.figure_id != figure_id:
        raise ValueError(f"{FIGURES[figure_id]}.build() returned figure {view.figure_id!r}")
    return view
