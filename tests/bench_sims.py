#!/usr/bin/env python3
"""Time every figure's sim call in CPython and print the figures (a benchmark, not a test).

    .venv/bin/python tests/bench_sims.py [--repeats 20]

The budget is about 10 ms native per call for the default inputs: the browser runs the
same code 3-5x slower (tests/test_sim_pyodide.py prints the WebAssembly timings).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.figure_sims import FIGURES  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    print("| figure | median ms | p95 ms |\n|---|---:|---:|")
    for name, sim in sorted(FIGURES.items()):
        params = sim.params()
        sim.compute(params)                     # warm caches
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            sim.compute(params)
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        print(f"| {name} | {statistics.median(times):.2f} | {times[int(0.95 * (len(times) - 1))]:.2f} |")
    return 0


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
