"""The Bokeh-server app behind `python -m widgets serve`: one figure, its Python running in
the server process (not in the browser). Run by `panel serve`:

    panel serve widgets/app.py --args ch04-batch-knee [STATE] [key=value ...]

(`python -m widgets serve ch04-batch-knee` runs exactly this.)
"""
from __future__ import annotations

import sys

import widgets
from sim.cli import UsageError
from widgets.state import parse_value


def parse(args: list[str]) -> tuple[str, str | None, dict]:
    """figure id, named state, control values from `ID [STATE] [key=value ...]`; values are
    read as JSON where they parse (64, 0.5, true) and as text otherwise (H200)."""
    if not args:
        raise UsageError(f"usage: ID [STATE] [key=value ...]; figure ids: {', '.join(widgets.FIGURES)}")
    figure_id, rest = args[0], args[1:]
    state = rest.pop(0) if rest and "=" not in rest[0] else None
    values = {key: parse_value(text) for key, _, text in (item.partition("=") for item in rest)}
    return figure_id, state, values


if __name__.startswith("bokeh"):
    figure_id, state, values = parse(sys.argv[1:])
    view = widgets.figure(figure_id, state, **values)
    view.layout.servable(title=getattr(widgets.module(figure_id), "TITLE", figure_id))
