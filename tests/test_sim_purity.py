"""sim/ is pure Python + numpy: no UI, no torch, nothing outside the standard library and numpy,
and nothing newer than Python 3.11 (the trace recorder imports it under 3.11)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIM_MODULES = sorted(f"sim.{p.stem}" for p in (ROOT / "sim").glob("*.py") if p.stem != "__init__")

PROBE = """
import importlib, json, sys
mods = json.loads(sys.argv[1])
for m in mods:
    importlib.import_module(m)
print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))
"""


# Every figure's default sim call, named as ("module.function", "module.Params") in argv[1].
RUN_CALLS = """
import importlib, json, sys
get = lambda dotted: getattr(importlib.import_module(dotted.rpartition('.')[0]), dotted.rpartition('.')[2])
for compute, params in json.loads(sys.argv[1]):
    get(compute)(get(params)())
"""


def _loaded_top_level(python: str) -> set:
    out = subprocess.run([python, "-c", PROBE, json.dumps(SIM_MODULES)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return set(json.loads(out))


def test_every_sim_module_is_listed():
    assert {"sim.roofline", "sim.kv", "sim.paging", "sim.scheduler", "sim.speculative", "sim.quant",
            "sim.pruning", "sim.attention", "sim.parallel", "sim.sampling", "sim.latency", "sim.hardware",
            "sim.models", "sim.batch", "sim.ops", "sim.forward", "sim.decode", "sim.batching",
            "sim.kernel_model", "sim.calibration"} <= set(SIM_MODULES)


def test_importing_sim_pulls_in_no_ui_or_torch():
    loaded = _loaded_top_level(sys.executable)
    assert not loaded & {"panel", "bokeh", "torch", "scipy", "pandas", "matplotlib", "widgets"}


def test_importing_sim_needs_only_stdlib_and_numpy():
    loaded = _loaded_top_level(sys.executable)
    allowed = set(sys.stdlib_module_names) | {"numpy", "sim", "__main__"}
    assert {m for m in loaded if not m.startswith("_")} - allowed == set()


def _python311() -> str | None:
    for cand in (ROOT / ".venv-trace" / "bin" / "python", shutil.which("python3.11")):
        if cand and Path(cand).exists():
            ok = subprocess.run([str(cand), "-c", "import sys, numpy; sys.exit(sys.version_info[:2] != (3, 11))"],
                                capture_output=True)
            if ok.returncode == 0:
                return str(cand)
    return None


def test_sim_imports_and_runs_under_python_311():
    py = _python311()
    if py is None:
        pytest.skip("no CPython 3.11 with numpy on this machine")
    loaded = _loaded_top_level(py)
    assert "sim" in loaded and not loaded & {"panel", "bokeh", "torch"}
    from tests.figure_sims import CALLS      # "module.name" strings: the 3.11 side imports no widget
    run = subprocess.run([py, "-c", RUN_CALLS, json.dumps(sorted(CALLS.values()))],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
