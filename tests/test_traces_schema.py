"""Trace format: the schema and the loader accept good traces and reject bad ones clearly."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpu_traces import schema, suites
from gpu_traces.schema import TraceError, load_trace, time_stats, validate_trace
from sim import kernel_model, models
from tests.synthetic import synthesize_trace

REPO = Path(__file__).resolve().parent.parent
SHIPPED_TRACES = sorted((REPO / "gpu_traces" / "traces").rglob("*.json"))


@pytest.fixture(scope="module")
def good_trace() -> dict:
    """A small valid trace (the quick CPU suite's points, timed by a spec-sheet model)."""
    cal = kernel_model.Calibration(device="test CPU", source="spec-sheet",
                                  bandwidth_bytes_per_s=20e9, flops_per_s={"bf16": 300e9},
                                  launch_overhead_s=5e-6, note="", compute_units=2)
    return synthesize_trace(cal, suite="cpu-quick", device_name="Test CPU", device_type="cpu",
                            noise=0.05, seed=1)


def _write(tmp_path: Path, data, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_good_trace_loads(tmp_path, good_trace):
    loaded = load_trace(_write(tmp_path, good_trace))
    assert loaded["device"]["slug"] == "cpu-test-cpu-2-threads"
    assert len(loaded["measurements"]) == len(good_trace["measurements"]) > 30


def test_wrong_schema_version_is_named(tmp_path, good_trace):
    bad = {**good_trace, "schema_version": 3}
    with pytest.raises(TraceError, match=r"t\.json: schema_version 3 is not supported; this "
                                         r"reader reads version 2"):
        load_trace(_write(tmp_path, bad))


def test_version_1_trace_is_migrated_without_touching_a_time(tmp_path, good_trace):
    old = {**good_trace, "schema_version": 1}
    loaded = load_trace(_write(tmp_path, old))
    assert loaded["schema_version"] == 2
    assert loaded["measurements"] == good_trace["measurements"]
    p = _write(tmp_path, old, "old.json")
    assert schema.migrate_file(p) is True
    assert json.loads(p.read_text()) == {**good_trace, "schema_version": 2}
    assert schema.migrate_file(p) is False


def test_recorded_measurement_needs_its_samples(tmp_path, good_trace):
    bad = json.loads(json.dumps(good_trace))
    del bad["measurements"][3]["time"]["samples_s"]
    with pytest.raises(TraceError, match=r"measurements\[3\].*\.time: a recorded measurement "
                                         r"needs samples_s"):
        load_trace(_write(tmp_path, bad))


def test_missing_schema_version(tmp_path, good_trace):
    bad = {k: v for k, v in good_trace.items() if k != "schema_version"}
    with pytest.raises(TraceError, match="missing 'schema_version'"):
        load_trace(_write(tmp_path, bad))


def test_truncated_json(tmp_path, good_trace):
    text = json.dumps(good_trace, indent=1)
    with pytest.raises(TraceError, match=r"t\.json: not valid JSON at line \d+, column \d+: .*"
                                         r"truncated\?"):
        load_trace(_write(tmp_path, text[: len(text) // 2]))


def test_empty_and_non_object(tmp_path):
    with pytest.raises(TraceError, match="empty file"):
        load_trace(_write(tmp_path, ""))
    with pytest.raises(TraceError, match="a trace is a JSON object, got list"):
        load_trace(_write(tmp_path, "[1, 2]"))
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.json")


def test_missing_field_names_its_place(tmp_path, good_trace):
    bad = copy.deepcopy(good_trace)
    del bad["device"]["name"]
    with pytest.raises(TraceError, match=r"device: 'name' is a required property"):
        load_trace(_write(tmp_path, bad))


def test_wrong_type_names_its_place(tmp_path, good_trace):
    bad = copy.deepcopy(good_trace)
    bad["device"]["compute_units"] = "two"
    bad["measurements"][3]["time"]["median_s"] = -1.0
    with pytest.raises(TraceError) as err:
        load_trace(_write(tmp_path, bad))
    msg = str(err.value)
    assert "(2 problems)" in msg
    assert "device.compute_units: 'two' is not of type 'integer'" in msg
    assert "measurements[3].time.median_s: -1.0 is less than or equal to the minimum of 0" in msg


def test_kind_specific_shape_is_checked(tmp_path, good_trace):
    bad = copy.deepcopy(good_trace)
    i = next(i for i, m in enumerate(bad["measurements"]) if m["kind"] == "gemm")
    del bad["measurements"][i]["shape"]["k"]
    with pytest.raises(TraceError, match=rf"measurements\[{i}\]\.shape: 'k' is a required property"):
        validate_trace(bad, "x.json")


def test_counts_must_agree_with_shape(good_trace):
    bad = copy.deepcopy(good_trace)
    i = next(i for i, m in enumerate(bad["measurements"]) if m["kind"] == "gemm")
    bad["measurements"][i]["flops"] *= 2
    with pytest.raises(TraceError, match=rf"(?s)x\.json: inconsistent trace .*measurements\[{i}\] "
                                         rf"\(.*\)\.flops: .* disagrees with its shape"):
        validate_trace(bad, "x.json")


def test_spread_must_be_ordered_and_match_samples(good_trace):
    bad = copy.deepcopy(good_trace)
    t = bad["measurements"][0]["time"]
    t["p25_s"], t["p75_s"] = t["p75_s"] * 1.5, t["p25_s"]
    with pytest.raises(TraceError, match=r"measurements\[0\] \(copy 4 KiB\)\.time: spread out of "
                                         r"order"):
        validate_trace(bad, "x.json")
    bad = copy.deepcopy(good_trace)
    bad["measurements"][1]["time"]["median_s"] *= 1 + 1e-6
    with pytest.raises(TraceError, match=r"time\.median_s: .* is not the median of its samples"):
        validate_trace(bad, "x.json")
    bad = copy.deepcopy(good_trace)
    bad["measurements"][2]["time"]["repeats"] += 1
    with pytest.raises(TraceError, match=r"time\.repeats: 6 but 5 samples"):
        validate_trace(bad, "x.json")


def test_duplicate_points_and_cpu_posing_as_gpu(good_trace):
    bad = copy.deepcopy(good_trace)
    bad["measurements"].append(copy.deepcopy(bad["measurements"][0]))
    with pytest.raises(TraceError, match=r"duplicate of measurements\[0\]"):
        validate_trace(bad, "x.json")
    bad = copy.deepcopy(good_trace)
    bad["device"]["catalogue_key"] = "H100-SXM"
    with pytest.raises(TraceError, match="a CPU trace cannot stand for a catalogue GPU"):
        validate_trace(bad, "x.json")


def test_time_stats_are_numpy_quantiles():
    import numpy as np
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    t = time_stats(xs)
    assert t["median_s"] == pytest.approx(float(np.median(xs)))
    assert t["p25_s"] == pytest.approx(float(np.quantile(xs, 0.25)))
    assert t["p75_s"] == pytest.approx(float(np.quantile(xs, 0.75)))
    assert (t["min_s"], t["max_s"], t["repeats"]) == (1.0, 10.0, 6)
    assert t["samples_s"] == xs                          # raw repeats kept in recording order


@pytest.mark.parametrize("path", SHIPPED_TRACES, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_traces_validate(path):
    trace = load_trace(path)
    assert not trace.get("synthetic"), "a synthetic trace must never be shipped"
    assert not trace["suite"]["quick"], "ship full-suite traces"
    if "source" in trace:          # imported: traces/imported-<source>/<device as the source names it>/
        assert path.parent.name == trace["source"]["device_as_named"]
        assert path.parent.parent.name == "imported-vidur" and trace["suite"]["name"] == "imported"
        return
    assert path.parent.name == trace["device"]["slug"], "traces live in traces/<device slug>/"
    assert trace["suite"]["name"] == trace["device"]["type"]


def test_a_cpu_trace_is_shipped():
    devices = [load_trace(p)["device"] for p in SHIPPED_TRACES]
    cpus = [d for d in devices if d["type"] == "cpu"]
    assert cpus, "the CPU trace recorded on the project's machine should be shipped"
    assert all(d["catalogue_key"] is None and d["slug"].startswith("cpu-") for d in cpus)


# ---- the suites: what a GPU run measures ------------------------------------------

def test_cuda_suite_gemms_are_the_model_layers():
    suite = suites.SUITES["cuda"]
    cases = suite.gemm_cases()
    for name in ("llama-3.1-8b", "llama-3.1-70b", "llama-2-7b"):
        shapes = models.get(name).linear_shapes()
        for layer, (k, n) in shapes.items():
            for dtype in ("bf16", "fp8"):
                ms = [m for d, mo, la, m, nn, kk in cases
                      if (d, mo, la, nn, kk) == (dtype, name, layer, n, k)]
                assert min(ms) == 1 and max(ms) == 8192
                assert sum(128 <= m <= 512 for m in ms) >= 10   # dense through the knee


def test_cuda_suite_plan_covers_every_kind_and_backend():
    points, skips = suites.plan(suites.SUITES["cuda"])
    kinds = {p.kind for p in points}
    assert kinds == set(kernel_model.KINDS)
    for kind in ("attention-decode", "attention-prefill"):
        # cuDNN attention too: current torch prefers it on Hopper
        assert {p.backend for p in points if p.kind == kind} == {"flash", "cudnn", "efficient",
                                                                 "math"}
    assert all(s.backend == "math" and "math backend" in s.reason for s in skips)
    decode = {(p.shape["batch"], p.shape["kv_len"]) for p in points if p.kind == "attention-decode"}
    assert {b for b, _ in decode} == {1, 4, 16, 64, 256}
    assert max(kv for _, kv in decode) == 131072
    assert {p.shape["op"] for p in points if p.kind == "elementwise"} == {
        "rms_norm", "silu_mul", "residual_add"}
    copies = sorted(p.shape["elements"] * 4 for p in points if p.kind == "copy")
    assert copies[0] == 4096 and copies[-1] >= 2 ** 31     # far beyond a 50 MB L2


def test_schema_file_is_the_one_used():
    assert schema.SCHEMA_PATH.name == "trace.schema.json"
    assert json.loads(schema.SCHEMA_PATH.read_text())["properties"]["schema_version"]["const"] == \
        schema.SCHEMA_VERSION


# ---- physically impossible points and GPU traces that are not the GPU's -----------

def _h100_trace(bandwidth_share=0.85, flops_share=0.7, **kw) -> dict:
    """A made-up H100 trace timed by a model at the given shares of the datasheet."""
    from sim import hardware
    gpu = hardware.get("H100-SXM")
    cal = kernel_model.Calibration(
        device="made-up H100", source="trace",
        bandwidth_bytes_per_s=bandwidth_share * gpu.hbm_bandwidth_bytes_per_s,
        flops_per_s={d: flops_share * gpu.dense_flops[d] for d in ("bf16", "fp8")},
        launch_overhead_s=4e-6, note="", compute_units=132)
    trace = synthesize_trace(cal, suite="cuda-quick", device_name="NVIDIA H100 80GB HBM3", **kw)
    trace["device"]["cache_bytes"] = 50 * 2 ** 20
    trace["timing"]["cache_flush_bytes"] = 100 * 2 ** 20
    return trace


def _set_time(m: dict, seconds: float) -> None:
    m["time"] = time_stats([seconds] * m["time"]["repeats"])


def test_a_plausible_gpu_trace_passes():
    validate_trace(_h100_trace(), "h100.json")


def test_an_impossible_time_is_rejected_with_file_and_place(good_trace):
    bad = copy.deepcopy(good_trace)
    i = next(i for i, m in enumerate(bad["measurements"]) if m["kind"] == "copy")
    _set_time(bad["measurements"][i], 1e-300)          # 8e303 B/s before this check
    with pytest.raises(TraceError, match=rf"(?s)x.json.*measurements\[{i}\] \(copy .*\)\.time: "
                                         r"samples from 1e-300 s"):
        validate_trace(bad, "x.json")


def test_faster_than_the_datasheet_by_more_than_the_margin():
    trace = _h100_trace()
    i, m = next((i, m) for i, m in enumerate(trace["measurements"]) if m["kind"] == "copy"
                and m["bytes"] > 2 ** 30)
    # 2.4 x the H100's 3.35 TB/s: writes absorbed by L2 can show up to 2x; 2.5x is the margin
    _set_time(m, m["bytes"] / (2.4 * 3.35e12))
    validate_trace(trace, "h100.json")
    _set_time(m, m["bytes"] / (2.6 * 3.35e12))
    with pytest.raises(TraceError, match=rf"measurements\[{i}\] .*more than 2.5 x the DRAM "
                                         r"bandwidth of H100-SXM"):
        validate_trace(trace, "h100.json")
    # without a cache flush (imported profiles) data may sit in L2: the margin is 10x
    trace["timing"]["cache_flush_bytes"] = 0
    validate_trace(trace, "h100.json")
    big = next((i, m) for i, m in enumerate(trace["measurements"]) if m["kind"] == "big-gemm"
               and m["dtype"] == "bf16")
    _set_time(big[1], big[1]["flops"] / (1.3 * 989e12))   # 30% above the dense bf16 peak
    with pytest.raises(TraceError, match=rf"measurements\[{big[0]}\] .*more than 1.25 x the "
                                         r"dense bf16 peak"):
        validate_trace(trace, "h100.json")


def test_cpu_like_numbers_under_a_gpu_name_are_rejected():
    # 0.5% of the H100's bandwidth and FLOP/s: what a CPU manages
    trace = _h100_trace(bandwidth_share=0.005, flops_share=0.005)
    with pytest.raises(TraceError, match=r"best large point reaches 0.50% of the "
                                         r"H100-SXM datasheet roofline \(need 20%\)"):
        validate_trace(trace, "h100.json")
    # real kernels at half the datasheet pass
    validate_trace(_h100_trace(bandwidth_share=0.5, flops_share=0.4), "h100.json")


def test_a_point_slower_than_any_kernel_of_the_gpu_is_rejected():
    trace = _h100_trace()
    i, m = next((i, m) for i, m in enumerate(trace["measurements"]) if m["kind"] == "copy"
                and m["bytes"] > 2 ** 30)
    roof = m["bytes"] / 3.35e12
    _set_time(m, 1e-3 + 900 * roof)
    validate_trace(trace, "h100.json")
    _set_time(m, 1e-3 + 1100 * roof)
    with pytest.raises(TraceError, match=rf"measurements\[{i}\] .*over 1000 x the datasheet time"):
        validate_trace(trace, "h100.json")


def test_catalogue_key_must_be_what_the_device_name_says():
    trace = _h100_trace()
    trace["device"]["name"] = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    with pytest.raises(TraceError, match=r"device.catalogue_key: 'H100-SXM' does not match .*MIG"):
        validate_trace(trace, "h100.json")
