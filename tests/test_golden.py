"""Golden snapshots: every figure's default result (the numbers it shows) against tests/golden/<figure id>.json.

A change of any shown number fails here, naming the figure and the JSON paths that moved, so the
change is visible in review. Floats are stored to SIG_DIGITS significant digits and compared with
REL_TOL, so floating-point noise across machines and BLAS builds does not fail the test.
Regenerate after an intended change (and say why in the commit message):

    GOLDEN_UPDATE=1 .venv/bin/python -m pytest -q tests/test_golden.py
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import widgets
from sim.figures import FIGURES as SIM_FIGURES, FigureSim

# figures whose module names its one sim call (COMPUTE, PARAMS) join those listed in sim.figures
FIGURES = {**SIM_FIGURES, **{fid: FigureSim(m.COMPUTE, m.PARAMS, ())
                             for fid in sorted(set(widgets.FIGURES) - set(SIM_FIGURES))
                             for m in [widgets.module(fid)] if hasattr(m, "COMPUTE")}}

GOLDEN = Path(__file__).resolve().parent / "golden"
SIG_DIGITS = 6            # significant digits a float is stored with
REL_TOL = 1e-5            # relative tolerance of the comparison, consistent with SIG_DIGITS
ABS_TOL = 1e-12           # below this a float counts as zero (e.g. -0.0 against 1e-17)
SUMMARY_OVER = 5000       # an array with more elements is stored as a summary
SAMPLE_AT = 8             # how many evenly spaced elements a summary keeps
UPDATE = os.environ.get("GOLDEN_UPDATE") == "1"


def _float(x: float):
    if math.isnan(x) or math.isinf(x):
        return str(x)                      # "nan", "inf", "-inf": JSON has no such numbers
    return float(f"{x:.{SIG_DIGITS}g}")


def _summary(a: np.ndarray) -> dict:
    flat = a.ravel()
    at = sorted({round(i * (flat.size - 1) / (SAMPLE_AT - 1)) for i in range(SAMPLE_AT)})
    return {"summary_of_array": True, "shape": list(a.shape), "min": snapshot(flat.min()),
            "max": snapshot(flat.max()), "sum": snapshot(flat.sum(dtype=np.float64)),
            "samples": {str(i): snapshot(flat[i]) for i in at}}


def snapshot(obj):
    """`obj` as plain JSON data: dataclasses as dicts of their fields, arrays as (nested) lists, floats rounded."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: snapshot(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, np.ndarray):
        return _summary(obj) if obj.size > SUMMARY_OVER else snapshot(obj.tolist())
    if isinstance(obj, enum.Enum):
        return snapshot(obj.value)
    if isinstance(obj, np.generic):
        return snapshot(obj.item())
    if isinstance(obj, dict):
        return {str(k): snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [snapshot(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return _float(obj)
    raise TypeError(f"no golden form for {type(obj).__name__}: {obj!r}")


def differences(old, new, path: str = "$") -> list[str]:
    """Every JSON path where `new` differs from `old` (floats within REL_TOL count as equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(old.keys() | new.keys()):
            if k not in new:
                out.append(f"{path}.{k}: {old[k]!r} -> (missing)")
            elif k not in old:
                out.append(f"{path}.{k}: (missing) -> {new[k]!r}")
            else:
                out += differences(old[k], new[k], f"{path}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: length {len(old)} -> {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if (isinstance(old, numbers) and isinstance(new, numbers) and not isinstance(old, bool)
            and not isinstance(new, bool)):
        if math.isclose(old, new, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
    elif old == new and type(old) is type(new):
        return []
    return [f"{path}: {old!r} -> {new!r}"]


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n")


@pytest.mark.parametrize("figure", sorted(FIGURES))
def test_default_result_matches_golden(figure):
    sim = FIGURES[figure]
    new = snapshot(sim.compute(sim.params()))
    path = GOLDEN / f"{figure}.json"
    if UPDATE:
        _write(path, new)
        return
    assert path.is_file(), (f"{figure}: no golden file {path.name}; write it with "
                            "GOLDEN_UPDATE=1 .venv/bin/python -m pytest tests/test_golden.py")
    diffs = differences(json.loads(path.read_text()), new)
    shown = "\n  ".join(diffs[:10]) + (f"\n  ... and {len(diffs) - 10} more" if len(diffs) > 10 else "")
    assert not diffs, (f"{figure}: default result differs from tests/golden/{path.name} at {len(diffs)} "
                       f"path(s) (golden -> now):\n  {shown}\nIf intended, regenerate with GOLDEN_UPDATE=1 "
                       "and say why in the commit message.")


def test_every_figure_has_a_golden_file_and_no_other():
    files = {p.stem for p in GOLDEN.glob("*.json")}
    assert sorted(set(FIGURES) - files) == [], "figures without a golden file"
    assert sorted(files - set(FIGURES)) == [], "golden files of no figure (remove them)"


def test_snapshot_rounds_and_differences_name_the_path():
    @dataclasses.dataclass
    class Inner:
        x: np.ndarray

    @dataclasses.dataclass
    class Outer:
        name: str
        value: float
        inner: Inner

    snap = snapshot(Outer("a", 1.23456789, Inner(np.array([0.1, 2.0]))))
    assert snap == {"name": "a", "value": 1.23457, "inner": {"x": [0.1, 2.0]}}
    moved = snapshot(Outer("a", 1.23456789 * (1 + 3e-6), Inner(np.array([0.1, 2.5]))))
    assert differences(snap, moved) == ["$.inner.x[1]: 2.0 -> 2.5"]
    big = snapshot(np.arange(SUMMARY_OVER + 1, dtype=float))
    assert big["sum"] == _float(SUMMARY_OVER * (SUMMARY_OVER + 1) / 2) and big["samples"][str(SUMMARY_OVER)] == SUMMARY_OVER
