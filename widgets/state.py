"""Setting a figure's controls from Python: the notebook API, `python -m widgets serve`,
the picture export and the tests all go through `apply_state`.

A state is a mapping control key -> value, e.g. {"gpu": "H200", "batch": 64} for
figure ch04-batch-knee (the keys are FigureView.controls' keys, the same as the
figure pages' URL parameters). A figure module may declare named states next to its
title, `STATES = {"h200-batch-64": {"gpu": "H200", "batch": 64}}`; STATES is optional.

Every value is checked against its control before any control is set, so a bad state
raises ValueError naming the figure, the key and what the control accepts, and leaves
the figure as it was.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import panel as pn

from sim.cli import quoted


def _options(widget) -> list:
    options = widget.options
    return list(options.values()) if isinstance(options, dict) else list(options)


def _same_kind(a: Any, b: Any) -> bool:
    """True/False only match bools; numbers match numbers; anything else matches its own type."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, Real) and isinstance(b, Real):
        return True
    return type(a) is type(b)


def accepts(widget) -> str:
    """What a control accepts, in words (for error messages and `describe`)."""
    if hasattr(widget, "options"):
        return "one of " + ", ".join(repr(o) for o in _options(widget))
    if isinstance(widget, (pn.widgets.Toggle, pn.widgets.Checkbox)):
        return "True or False"
    if isinstance(widget, pn.widgets.FloatInput):
        return f"a number from {widget.start!r} to {widget.end!r}"
    if hasattr(widget, "start") and hasattr(widget, "end"):
        kind = "an integer" if isinstance(widget, (pn.widgets.IntSlider, pn.widgets.Player)) else "a number"
        step = getattr(widget, "step", None)
        grid = f" in steps of {step!r} from {widget.start!r}" if step not in (None, 1) else ""
        return f"{kind} from {widget.start!r} to {widget.end!r}{grid}"
    return f"a value for a {type(widget).__name__}"


def checked(figure_id: str, key: str, widget, value: Any) -> Any:
    """`value` as control `key` of `figure_id` would hold it; ValueError if it cannot."""
    def bad(why: str = "") -> ValueError:
        return ValueError(f"figure {figure_id}: {key}={quoted(value)} is not valid{why}; "
                          f"{key} accepts {accepts(widget)}")

    if hasattr(widget, "options"):
        for option in _options(widget):
            if _same_kind(option, value) and option == value:
                return option
        raise bad()
    if isinstance(widget, (pn.widgets.Toggle, pn.widgets.Checkbox)):
        if not isinstance(value, bool):
            raise bad()
        return value
    if isinstance(widget, pn.widgets.FloatInput):      # typed: any number in range, no grid
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise bad()
        if not widget.start <= value <= widget.end:
            raise bad(" (out of range)")
        return float(value)
    if hasattr(widget, "start") and hasattr(widget, "end"):
        integer = isinstance(widget, (pn.widgets.IntSlider, pn.widgets.Player))
        if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
            raise bad()
        if not math.isfinite(value) or not widget.start <= value <= widget.end:
            raise bad(" (out of range)")
        step = getattr(widget, "step", None) or 1
        steps = (value - widget.start) / step
        if abs(steps - round(steps)) > 1e-9:
            raise bad(" (between the slider's steps)")
        return int(value) if integer else float(value)
    return value


def other_value(widget) -> Any:
    """A value for control `widget` other than its present one (None for a Button, which
    has no value): the tests move controls to it, and a page rehearses each move with it."""
    if isinstance(widget, pn.widgets.Button):
        return None
    if isinstance(widget, pn.widgets.Player):
        return widget.end if widget.value != widget.end else widget.start
    if isinstance(widget, (pn.widgets.Checkbox, pn.widgets.Toggle, pn.widgets.Switch)):
        return not widget.value
    if isinstance(widget, pn.widgets.FloatInput):
        return 1000.0 if widget.value != 1000.0 else 0.5
    if isinstance(widget, pn.widgets.DiscreteSlider):
        opts = list(widget.values)
        return opts[(opts.index(widget.value) + len(opts) // 2) % len(opts)]
    if isinstance(widget, (pn.widgets.IntSlider, pn.widgets.FloatSlider)):
        lo, hi, step = widget.start, widget.end, widget.step or 1
        target = lo + 0.7 * (hi - lo)
        v = lo + round((target - lo) / step) * step
        v = type(widget.value)(v) if isinstance(widget.value, int) else round(v, 10)
        return v if v != widget.value else type(widget.value)(hi if widget.value != hi else lo)
    if hasattr(widget, "options"):
        others = [o for o in _options(widget) if o != widget.value]
        return others[len(others) // 2]
    raise TypeError(f"no other value rule for {type(widget).__name__}")


def parse_value(text: str) -> Any:
    """A control value written as text (a command line, a URL): JSON where it parses
    (64, 0.5, true), the text itself otherwise (H200)."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def apply_state(view, **values: Any):
    """Set the controls of FigureView `view` to `values` (control key -> value), each checked
    against its control first; the figure updates as if a reader had moved them. Returns `view`."""
    unknown = [k for k in values if k not in view.controls]
    if unknown:
        raise ValueError(f"figure {view.figure_id} has no control {', '.join(map(repr, unknown))}; "
                         f"its controls are {', '.join(view.controls)}")
    new = {k: checked(view.figure_id, k, view.controls[k], v) for k, v in values.items()}
    for key, value in new.items():
        if view.controls[key].value != value:
            view.controls[key].value = value
    return view


def named_states(module) -> dict[str, dict[str, Any]]:
    """The named states a figure module declares (STATES is optional: {} if absent)."""
    states = getattr(module, "STATES", None) or {}
    if not isinstance(states, dict) or not all(isinstance(v, dict) for v in states.values()):
        raise ValueError(f"{module.__name__}.STATES must map state names to {{control key: value}} dicts")
    return states


def state_values(module, figure_id: str, state: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """A named state (if any) with `values` laid over it."""
    if state is None:
        return dict(values)
    states = named_states(module)
    if state not in states:
        raise ValueError(f"figure {figure_id} has no named state {state!r}; "
                         f"its states are: {', '.join(states) or 'none'}")
    return {**states[state], **values}


def describe(view) -> dict[str, str]:
    """control key -> what it accepts, for a figure's help text."""
    return {key: accepts(w) for key, w in view.controls.items()}
