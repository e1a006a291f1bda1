"""Whole forward steps timed on a GPU (gpu_traces/steps.py): the shipped recordings, what they
say about the step model, and the recorder's code path on the CPU."""
from __future__ import annotations

import copy
import doctest
import json
import subprocess
from pathlib import Path

import pytest

from gpu_traces import steps
from sim import forward

REPO = Path(__file__).resolve().parent.parent
TRACE_PYTHON = REPO / ".venv-trace" / "bin" / "python"


@pytest.fixture(scope="module")
def shipped():
    return steps.shipped()


def test_kernel_categories():
    assert doctest.testmod(steps).failed == 0


def test_the_h200_recordings_are_complete_and_repeat(shipped):
    assert len(shipped) == 2
    for doc in shipped:
        assert doc["device"]["name"] == "NVIDIA H200" and doc["device"]["catalogue_key"] == "H200"
        assert not doc["quick"] and doc["skipped"] == []
        assert len(doc["steps"]) == 2 * len(steps.GPU_PLAN) == 44
        assert doc["file"].startswith("gpu_traces/steps/h200/")
    a, b = ({(s["model"], s["phase"], s["batch"], s["context"], s["mode"]): s["time"]["median_s"]
             for s in doc["steps"]} for doc in shipped)
    assert set(a) == set(b)
    graph = [abs(b[k] / a[k] - 1) for k in a if k[-1] == "cuda-graph"]
    eager = [abs(b[k] / a[k] - 1) for k in a if k[-1] == "eager"]
    assert max(graph) < 0.02          # 0.6% measured: a replayed graph is steady
    assert max(eager) < 0.2           # the host's dispatch varies more (11% measured)


def _step(doc, model, phase, batch, context, mode):
    return next(s for s in doc["steps"] if (s["model"], s["phase"], s["batch"], s["context"],
                                            s["mode"]) == (model, phase, batch, context, mode))


def test_the_step_model_is_low_by_the_unfused_kernels(shipped):
    """The model costs an engine's fused step: on the plain PyTorch steps it is low by 10-31%,
    while its matrix multiplications and attention match the measured kernels of those kinds."""
    doc = shipped[-1]
    for s in doc["steps"]:
        if s["model"] != "llama-3.1-8b" or s["mode"] != "cuda-graph":
            continue
        r = (forward.decode_step(s["model"], "H200", s["batch"], s["context"])
             if s["phase"] == "decode" else
             forward.prefill_pass(s["model"], "H200", s["context"], cuda_graphs=True))
        assert 0.6 < r.time_s / s["time"]["median_s"] < 0.95, s
        if s["phase"] == "decode":
            cat = s["eager_kernels"]["by_category"]
            kinds = r.busy_time_by_kind_s()
            measured = cat["matmul"]["busy_s"] + cat["attention"]["busy_s"]
            assert abs(kinds["gemm"] + kinds["attention"] - measured) / measured < 0.16, s
            # the plain step runs more than twice the model's kernels
            assert s["eager_kernels"]["kernels"] > 2 * r.kernels


def test_eager_steps_are_paced_by_the_host(shipped):
    """Issued from Python, Llama 3.2 1B's one-user step takes about 12 µs per kernel, three
    times its graph replay, while its kernels run for well under half of it."""
    doc = shipped[-1]
    g = _step(doc, "llama-3.2-1b", "decode", 1, 1024, "cuda-graph")
    e = _step(doc, "llama-3.2-1b", "decode", 1, 1024, "eager")
    ek = e["eager_kernels"]
    assert e["time"]["median_s"] > 2.5 * g["time"]["median_s"]
    assert ek["busy_s"] < 0.4 * e["time"]["median_s"]
    assert 8e-6 < e["time"]["median_s"] / ek["kernels"] < 16e-6


def test_a_steps_file_that_breaks_the_rules_is_refused(shipped, tmp_path):
    doc = copy.deepcopy({k: v for k, v in shipped[-1].items() if k != "file"})
    s = next(x for x in doc["steps"] if x["phase"] == "decode")
    s["time"]["samples_s"] = [1e-4] * 5             # 0.1 ms: faster than reading 15 GB
    s["time"]["median_s"] = 1e-4
    with pytest.raises(steps.StepsError, match="faster than reading"):
        steps.check_steps(doc, "bad")
    path = tmp_path / "x-steps.json"
    path.write_text(json.dumps({**doc, "format_version": 99}))
    with pytest.raises(steps.StepsError, match="not a gpu-steps file"):
        steps.load_steps(path)
    path.write_text("{")
    with pytest.raises(steps.StepsError, match="cannot read"):
        steps.load_steps(path)


def test_the_recorder_runs_on_the_cpu(tmp_path):
    """The quick plan on the CPU: a tiny two-layer model, eager only (no CUDA graphs there)."""
    if not TRACE_PYTHON.exists():
        pytest.fail(f"{TRACE_PYTHON} is missing: `./dev test` creates it")
    out = tmp_path / "steps.json"
    proc = subprocess.run([str(TRACE_PYTHON), "-m", "gpu_traces.steps", "--device", "cpu",
                           "--quick", "--repeats", "3", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = steps.load_steps(out)
    assert doc["quick"] and doc["device"]["type"] == "cpu" and doc["device"]["catalogue_key"] is None
    assert [s["mode"] for s in doc["steps"]] == ["eager"] * len(steps.QUICK_PLAN)
    assert {x["reason"] for x in doc["skipped"]} == {"RuntimeError: CUDA graphs need a GPU"}
    assert all(s["time"]["repeats"] == 3 for s in doc["steps"])
