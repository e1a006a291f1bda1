"""Drive a figure the same way in CPython and in the browser, and compare what it shows.

What a figure shows is read from its Bokeh models, in both places, the same way:
- sources: ColumnDataSource models named "src-<figure id>-<key>" -> {column: list};
- readouts: models with CSS class "out-<key>" -> their `text`.
A reader's change is a change of Bokeh model properties; `control_patch` finds, in
CPython, which properties a Panel value change sets, so the browser test can set
exactly those on the live model.
"""
from __future__ import annotations

import math
from typing import Any

from bokeh.document import Document


def _plain(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if hasattr(v, "item") else v


def collect(root, figure_id: str) -> dict:
    """Sources and readouts under a Bokeh root model (CPython side)."""
    out = {"sources": {}, "readouts": {}}
    prefix = f"src-{figure_id}-"
    for m in [root, *root.references()]:
        name = getattr(m, "name", None) or ""
        if name.startswith(prefix):
            out["sources"][name[len(prefix):]] = {k: _plain(v) for k, v in m.data.items()}
        for cls in getattr(m, "css_classes", None) or []:
            if cls.startswith("out-"):
                out["readouts"][cls[4:]] = m.text
    return out


# The same traversal in the browser, over the figure's live (or preview) root.
COLLECT_JS = """([id, which]) => {
  const fig = window.__guide.figs.get(id);
  const root = which === 'live' ? fig.liveRoot : fig.staticRoot;
  const out = {sources: {}, readouts: {}};
  const prefix = `src-${id}-`;
  const plain = (v) => (ArrayBuffer.isView(v) || Array.isArray(v)) ? Array.from(v, plain) : v;
  for (const m of [root, ...root.references()]) {
    if (m.name && m.name.startsWith(prefix)) {
      const data = m.data instanceof Map ? Object.fromEntries(m.data) : m.data;
      out.sources[m.name.slice(prefix.length)] = Object.fromEntries(
        Object.entries(data).map(([k, v]) => [k, plain(v)]));
    }
    for (const c of (m.css_classes || [])) if (c.startsWith('out-')) out.readouts[c.slice(4)] = m.text;
  }
  return out;
}"""

SET_JS = """([id, key, props]) => {
  const fig = window.__guide.figs.get(id);
  const root = fig.liveRoot || fig.staticRoot;
  let m = [root, ...root.references()].find(m => (m.css_classes || []).includes(`ctl-${key}`));
  if (!m) throw new Error(`figure ${id} has no control ${key}`);
  const attrs = Object.keys(props);
  if (!attrs.every(a => a in m.properties))          // a composite control: its inner model
    m = [...m.references()].find(r => attrs.every(a => a in r.properties)) || m;
  for (const [attr, value] of Object.entries(props)) m[attr] = value;
  return true;
}"""


VALUE_ATTRS = ("value", "active", "values")


def control_model(root, key: str):
    """The Bokeh model holding control `key`'s value (the inner one of a composite)."""
    m = next(m for m in [root, *root.references()] if f"ctl-{key}" in (getattr(m, "css_classes", None) or []))
    if any(m.lookup(a, raises=False) for a in VALUE_ATTRS):
        return m
    return next((r for r in m.references() if any(r.lookup(a, raises=False) for a in VALUE_ATTRS)), m)


def apply_change(view, key: str, value: Any) -> None:
    """Set a control in CPython the way a reader would (a Button press for buttons)."""
    import panel as pn

    widget = view.controls[key]
    if isinstance(widget, pn.widgets.Button):
        widget.clicks += 1
    else:
        widget.value = value


def cpython_state(figure_id: str, changes: list[tuple[str, Any]] = ()) -> dict:
    """Build the figure in CPython, apply the changes in order, read what it shows."""
    import widgets

    view = widgets.build(figure_id)
    root = view.layout.get_root(Document())
    for key, value in changes:
        apply_change(view, key, value)
    return collect(root, figure_id)


class CPythonFigure:
    """One figure built in CPython, moved one control at a time: each move's patch (the Bokeh
    properties it sets on its control, as `control_patch`) and what the figure then shows (as
    `cpython_state` of all the moves so far), without building the figure again per move."""

    def __init__(self, figure_id: str) -> None:
        import widgets

        self.figure_id, self.view = figure_id, widgets.build(figure_id)
        self.root = self.view.layout.get_root(Document())

    def move(self, key: str, value: Any) -> tuple[dict, dict]:
        model = control_model(self.root, key)
        before = {k: _plain(v) for k, v in model.properties_with_values(include_defaults=True).items()}
        apply_change(self.view, key, value)
        after = {k: _plain(v) for k, v in model.properties_with_values(include_defaults=True).items()}
        patch = {k: v for k, v in after.items() if before.get(k) != v and k not in ("tags",)}
        return patch, collect(self.root, self.figure_id)


def control_patch(figure_id: str, key: str, value: Any, start: Any = None) -> dict:
    """The Bokeh property values a reader's change of control `key` to `value` sets, from
    `start` (from the control's default when None)."""
    import widgets

    view = widgets.build(figure_id)
    model = control_model(view.layout.get_root(Document()), key)
    if start is not None:
        apply_change(view, key, start)
    before = {k: _plain(v) for k, v in model.properties_with_values(include_defaults=True).items()}
    apply_change(view, key, value)
    after = {k: _plain(v) for k, v in model.properties_with_values(include_defaults=True).items()}
    return {k: v for k, v in after.items() if before.get(k) != v and k not in ("tags",)}


def alternate_value(widget) -> Any:
    """A value for `widget` different from its present one (what a test moves it to)."""
    from widgets.state import other_value

    return other_value(widget)


def close(a: Any, b: Any, rel: float = 1e-12, path: str = "") -> list[str]:
    """Differences between two collected states (floats compared to `rel`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = [f"{path}/{k}: missing on one side" for k in set(a) ^ set(b)]
        for k in sorted(set(a) & set(b)):
            diffs += close(a[k], b[k], rel, f"{path}/{k}")
        return diffs
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += close(x, y, rel, f"{path}[{i}]")
            if len(out) > 5:
                break
        return out
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if (isinstance(a, float) and math.isnan(a)) and (isinstance(b, float) and math.isnan(b)):
            return []
        return [] if math.isclose(a, b, rel_tol=rel, abs_tol=1e-300) else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
