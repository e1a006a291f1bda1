"""sim/ runs unchanged in the browser runtime: Pyodide (CPython 3.12 in WebAssembly) with its numpy.

Runs under Node.js with the Pyodide files the site build vendors (_site/vendor/pyodide); it is
skipped when Node or a built site is missing. Every figure's default call (named as strings in
CPython, from tests/figure_sims.py, so Pyodide needs no Panel) and every module's
docstring examples run inside WebAssembly.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "_site" / "vendor" / "pyodide"

SCRIPT = r"""
import { loadPyodide } from %(module)s;
import fs from "fs";
const py = await loadPyodide({ indexURL: %(index)s });
await py.loadPackage(["numpy"]);
py.FS.mkdirTree("/guide/sim/calibrations");
const simDir = %(sim)s;
for (const f of fs.readdirSync(simDir)) if (f.endsWith(".py")) py.FS.writeFile("/guide/sim/" + f, fs.readFileSync(simDir + "/" + f));
const calDir = simDir + "/calibrations";
if (fs.existsSync(calDir)) for (const f of fs.readdirSync(calDir)) py.FS.writeFile("/guide/sim/calibrations/" + f, fs.readFileSync(calDir + "/" + f));
const out = py.runPython(`
import sys, json, time, doctest, importlib, pkgutil
sys.path.insert(0, "/guide")
import sim
get = lambda dotted: getattr(importlib.import_module(dotted.rpartition(".")[0]), dotted.rpartition(".")[2])
times = {}
for name, (compute, params) in json.loads(%(calls)s).items():
    f = get(compute); p = get(params)(); f(p)
    t = time.perf_counter(); f(p); times[name] = time.perf_counter() - t
failed = 0
mods = sorted(m.name for m in pkgutil.iter_modules(sim.__path__) if m.name not in ("calibration",))
for m in mods:
    failed += doctest.testmod(importlib.import_module("sim." + m)).failed
import numpy
json.dumps({"platform": sys.platform, "python": sys.version.split()[0], "numpy": numpy.__version__,
            "doctest_failures": failed, "modules": mods, "times": times})
`);
console.log("RESULT " + out);
"""


from tests.figure_sims import CALLS  # noqa: E402   figure id -> ("module.function", "module.Params")

FIGURES_IDS = sorted(CALLS)


def test_every_figure_and_example_runs_in_pyodide(tmp_path):
    node = shutil.which("node")
    if node is None or not (VENDOR / "pyodide.mjs").is_file():
        pytest.skip("needs Node.js and a built site with the vendored Pyodide runtime (./dev build)")
    script = tmp_path / "run.mjs"
    script.write_text(SCRIPT % {"module": json.dumps((VENDOR / "pyodide.mjs").as_uri()),
                                "index": json.dumps(str(VENDOR) + "/"), "sim": json.dumps(str(ROOT / "sim")),
                                "calls": repr(json.dumps(CALLS))})
    run = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(l for l in run.stdout.splitlines() if l.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    assert r["platform"] == "emscripten" and r["python"].startswith("3.12") and r["numpy"] == "2.0.2"
    assert r["doctest_failures"] == 0
    assert {"roofline", "scheduler", "paging", "quant"} <= set(r["modules"])
    assert set(r["times"]) == set(FIGURES_IDS)
    # timings are printed, not asserted (tests/bench_sims.py is the benchmark)
    print("figure sim calls in WebAssembly (ms):",
          {k: round(v * 1e3, 1) for k, v in sorted(r["times"].items())})
