"""The calibration the simulations use: its interface, its formulas, and where it comes from."""
from __future__ import annotations

import doctest
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu_traces import calibrate, shapes
from sim import calibration as C
from sim import hardware, kernel_model
from tests.synthetic import synthesize_trace

REPO = Path(__file__).resolve().parent.parent
H100, H200 = hardware.get("H100-SXM"), hardware.get("H200")


@pytest.mark.parametrize("module", [C, shapes], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_spec_sheet_defaults():
    cal = kernel_model.spec_sheet(H100)
    assert cal.source == "spec-sheet"
    assert cal.bandwidth_bytes_per_s == pytest.approx(0.8 * 3.35e12)
    assert cal.flops("bf16") == pytest.approx(0.6 * 989e12)
    assert cal.launch_overhead_s == kernel_model.DEFAULT_LAUNCH_OVERHEAD_S == 4e-6
    assert "80% of peak bandwidth" in cal.note
    with pytest.raises(ValueError, match="valid dtypes: bf16, fp16, fp8, int8"):
        cal.flops("fp4")


def test_plain_roofline_formulas():
    cal = kernel_model.spec_sheet(H100)
    # decode GEMM of Llama 3.1 8B's gate_up at batch 1: memory-bound
    m, n, k = 1, 28672, 4096
    t = cal.gemm_time_s(m, n, k)
    nbytes = 2.0 * (k * n + m * k + m * n)
    assert t == pytest.approx(4e-6 + nbytes / (0.8 * 3.35e12))
    assert t == cal.op_time_s(2.0 * m * n * k, nbytes)
    # a large prefill GEMM: compute-bound
    assert cal.gemm_time_s(8192, 8192, 8192) == pytest.approx(4e-6 + 2 * 8192 ** 3 / (0.6 * 989e12))
    assert cal.attention_time_s(1e9, 1e6) == cal.op_time_s(1e9, 1e6)
    assert cal.elementwise_time_s(1e6) == pytest.approx(4e-6 + 1e6 / (0.8 * 3.35e12))
    with pytest.raises(ValueError):
        cal.gemm_time_s(0, 1, 1)
    with pytest.raises(ValueError):
        cal.op_time_s(-1.0, 1.0)


def test_smooth_max_and_tile_waves():
    a, b = np.array([1.0, 3.0, 0.0]), np.array([1.0, 4.0, 2.0])
    assert kernel_model.smooth_max(a, b, 2.0) == pytest.approx([2 ** 0.5, 5.0, 2.0])
    assert kernel_model.smooth_max(a, b, 1.0) == pytest.approx(a + b)
    assert kernel_model.smooth_max(a, b, 200.0) == pytest.approx(np.maximum(a, b), rel=0.01)
    assert float(kernel_model.smooth_max(0.0, 0.0, 3.0)) == 0.0
    # 132 SMs: 132 tiles fill one wave, 133 need a second, nearly empty one
    assert float(kernel_model.tile_wave_efficiency(128 * 12, 128 * 11, 128, 128, 132)) == 1.0
    assert float(kernel_model.tile_wave_efficiency(128 * 133, 128, 128, 128, 132)) == pytest.approx(133 / 264)
    # a lone token gets a tile its own size; 129 tokens need a second, nearly empty tile row
    assert float(kernel_model.tile_wave_efficiency(1, 128, 64, 128, 1)) == 1.0
    assert float(kernel_model.tile_wave_efficiency(65, 128, 64, 128, 1)) == pytest.approx(65 / 128)
    # 48 tiles on 132 SMs: K split in two fills 96 of them
    assert float(kernel_model.tile_wave_efficiency(1, 6144, 128, 128, 132)) == pytest.approx(96 / 132)


def _fitted(dtype_flops=7e14) -> kernel_model.Calibration:
    return kernel_model.Calibration(
        device="x", source="trace", bandwidth_bytes_per_s=4e12, flops_per_s={"bf16": dtype_flops},
        launch_overhead_s=3e-6, note="", gemm={"bf16": kernel_model.GemmShapeParams(0.9, 0.8, 128, 128, 3.0)},
        attention={"flash": kernel_model.RooflineParams(0.6, 0.7, 4.0, 5e-6)},
        elementwise={"rms_norm": kernel_model.LineParams(8e-6, 0.5)}, compute_units=132,
        default_attention_backend="flash")


def test_shape_aware_gemm_golden_value():
    cal = _fitted()
    m, n, k = 200, 6144, 4096
    flops, nbytes = 2.0 * m * n * k, 2.0 * (k * n + m * k + m * n)
    tiles = 2 * 48                                   # ceil(200/128) x 6144/128
    eta = (200 * 6144) / (256 * 6144) * tiles / (1 * 132)
    mem, comp = nbytes / (0.8 * 4e12), flops / (0.9 * 7e14 * eta)
    want = 3e-6 + (mem ** 3 + comp ** 3) ** (1 / 3)
    assert cal.gemm_time_s(m, n, k) == pytest.approx(want, rel=1e-12)
    sweep = cal.gemm_times_s(np.array([1, 200, 4096]), n, k)
    assert sweep[1] == pytest.approx(want, rel=1e-12)
    assert np.all(np.diff(sweep) > 0)
    # weight-only int4 runs bf16 arithmetic on a quarter of the weight bytes: at batch 1
    # the time beyond launch is the weight read, so it shrinks about 4x
    t16 = cal.gemm_time_s(1, 28672, 4096) - 3e-6
    t4 = cal.gemm_time_s(1, 28672, 4096, weight_bytes_per_elem=0.5) - 3e-6
    assert t4 == pytest.approx(t16 / 4, rel=0.02)


def test_few_tokens_cost_m_half_more_rows_of_math():
    g = kernel_model.GemmShapeParams(0.9, 0.8, 16, 64, 4.0, half_rate_tokens=64.0)
    # the math of m tokens takes as long as m / w + m_half rows would at the full rate,
    # w being the tiles-and-waves share: eta = w m / (m + m_half w)
    for m in (8, 33, 4096):
        w = float(kernel_model.tile_wave_efficiency(m, 5120, 16, 64, 132))
        assert float(g.efficiency(m, 5120, 132)) == pytest.approx(w * m / (m + 64 * w), rel=1e-12)
    flops_s = 2 * 33 * 5120 * 5120 / (0.9 * 9.9e14 * float(g.efficiency(33, 5120, 132)))
    w33 = float(kernel_model.tile_wave_efficiency(33, 5120, 16, 64, 132))
    assert flops_s == pytest.approx(2 * 5120 * 5120 * (33 / w33 + 64) / (0.9 * 9.9e14), rel=1e-12)
    # so more tokens never take less time, tile steps, waves and split K included
    m = np.arange(1, 2049, dtype=float)
    for tile_m, tile_n, units in ((16, 64, 132), (128, 128, 132), (64, 256, 108), (1, 32, 1)):
        g = replace(g, tile_m=tile_m, tile_n=tile_n)
        for n, k in ((5120, 5120), (768, 4096), (28672, 8192)):
            t = g.time_s(2 * m * n * k, 2 * (m * k + k * n + m * n), m, n, k,
                         bandwidth_bytes_per_s=3.3e12, flops_per_s=9.9e14, launch_overhead_s=2e-6,
                         compute_units=units)
            assert np.all(np.diff(t) >= 0), (tile_m, tile_n, units, n, k)


def test_attention_and_elementwise_use_fitted_terms():
    cal = _fitted()
    want = 3e-6 + 5e-6 + float(kernel_model.smooth_max(1e9 / (0.7 * 4e12), 1e12 / (0.6 * 7e14), 4.0))
    assert cal.attention_time_s(1e12, 1e9) == pytest.approx(want)
    assert cal.attention_time_s(1e12, 1e9, backend="flash") == pytest.approx(want)
    with pytest.raises(ValueError, match="no fitted attention backend 'math'; valid: flash"):
        cal.attention_time_s(1e12, 1e9, backend="math")
    # an unfused backend moves its score matrix through memory score_traffic times
    unfused = replace(cal, attention={"math": kernel_model.RooflineParams(0.6, 0.7, 4.0, 5e-6, 2.0)})
    want = 3e-6 + 5e-6 + float(kernel_model.smooth_max((1e9 + 2 * 5e8) / (0.7 * 4e12), 1e12 / (0.6 * 7e14), 4.0))
    assert unfused.attention_time_s(1e12, 1e9, backend="math", score_bytes=5e8) == pytest.approx(want)
    assert kernel_model.score_bytes({"score_elements": 1000, "bytes_per_elem": 2}) == 2000.0
    assert cal.elementwise_time_s(1e9, op="rms_norm") == pytest.approx(8e-6 + 1e9 / 2e12)
    assert cal.elementwise_time_s(1e9) == pytest.approx(3e-6 + 1e9 / 4e12)
    with pytest.raises(ValueError, match="no fitted elementwise op 'softmax'"):
        cal.elementwise_time_s(1e9, op="softmax")


# ---- for_gpu: own trace > carried over > spec sheet ---------------------------------

@pytest.fixture(scope="module")
def h200_dir(tmp_path_factory):
    """A calibration folder holding one H200 calibration (from a made-up trace)."""
    truth = _fitted()
    truth = replace(truth, flops_per_s={"bf16": 7e14, "fp8": 1.3e15},
                    gemm={**truth.gemm, "fp8": kernel_model.GemmShapeParams(0.85, 0.75, 128, 128, 2.5)},
                    elementwise={op: kernel_model.LineParams(5e-6, 0.7)
                                 for op in ("rms_norm", "silu_mul", "residual_add")},
                    attention={b: kernel_model.RooflineParams(0.5, 0.6, 3.0, 4e-6)
                               for b in ("flash", "efficient", "math")})
    d = tmp_path_factory.mktemp("cal")
    data = calibrate.fit_trace(synthesize_trace(truth, device_name="NVIDIA H200", noise=0.01),
                               "synthetic.json")
    (d / "h200.json").write_text(calibrate.dumps(data))
    return d


def test_own_trace_wins(h200_dir):
    cal = C.for_gpu(H200, h200_dir)
    assert cal.source == "trace"
    assert cal.device == H200.display_name
    assert cal.bandwidth_bytes_per_s == pytest.approx(4e12, rel=0.01)
    assert set(cal.flops_per_s) == set(H200.dense_flops)      # int8/fp16 filled in
    assert cal.flops("fp16") == pytest.approx(cal.flops("bf16") / 989e12 * 989e12)
    assert cal.provenance.device == "NVIDIA H200"
    assert "calibrated from a trace of this GPU" in cal.note and "held-out error" in cal.note
    assert cal.fit["heldout_median_rel_err"] < 0.05


def test_same_architecture_carries_efficiencies_over(h200_dir):
    own = C.for_gpu(H200, h200_dir)
    cal = C.for_gpu(H100, h200_dir)
    assert cal.source == "carried-over"
    assert cal.device == H100.display_name
    eff = own.bandwidth_bytes_per_s / H200.hbm_bandwidth_bytes_per_s
    assert cal.bandwidth_bytes_per_s == pytest.approx(eff * H100.hbm_bandwidth_bytes_per_s, rel=1e-5)
    assert cal.flops("bf16") == pytest.approx(own.flops("bf16"), rel=1e-5)   # same compute
    assert cal.gemm == own.gemm and cal.compute_units == H100.sm_count
    assert "no timings of its own" in cal.note and "carried over from NVIDIA H200" in cal.note
    # slower memory: a decode GEMM takes longer on the H100
    assert cal.gemm_time_s(1, 28672, 4096) > own.gemm_time_s(1, 28672, 4096)


def test_other_architecture_falls_back_to_spec_sheet(h200_dir):
    ampere = replace(H100, name="test-ampere", arch="ampere", display_name="Test Ampere")
    assert C.for_gpu(ampere, h200_dir).source == "spec-sheet"
    assert C.for_gpu(H100, h200_dir / "empty-absent").source == "spec-sheet"


def test_cpu_calibration_never_stands_in_for_a_gpu():
    cpus = [d for d in C.recorded_devices() if d.device_type == "cpu"]
    assert cpus, "a CPU calibration is shipped"
    for gpu in (H100, H200):
        cal = C.for_gpu(gpu)
        assert cal.provenance is None or cal.provenance.device_type == "cuda"


# ---- the shipped calibrations, as the figures see them ------------------------------

@pytest.fixture(scope="module")
def shipped():
    devices = C.recorded_devices()
    assert devices, "no calibration shipped in sim/calibrations/"
    return devices


def test_imported_devices_say_where_their_timings_come_from(shipped):
    imported = [d for d in shipped if d.provenance.imported]
    assert {d.catalogue_key for d in imported} == {"H100-SXM", "A100-80GB"}
    for dev in imported:
        prov = dev.provenance
        caption = prov.caption()
        for part in (dev.name, "microsoft/vidur", "commit 7d47513", "MIT licence",
                     "not recorded by this project", "leave-one-model-out", "plain roofline"):
            assert part in caption, caption
        assert (REPO / prov.trace_file).is_dir()
        assert {p.kind for p in dev.points} == {"gemm", "elementwise"}
        assert len(dev.points) <= 300          # a small subset for the figures, not the traces
        assert all(np.isnan(p.p25_s) and np.isnan(p.p75_s) for p in dev.points)   # not published
        assert "spec-sheet" not in C.for_gpu(hardware.get(dev.catalogue_key)).note


def test_recorded_devices_carry_provenance_and_points(shipped):
    for dev in (d for d in shipped if not d.provenance.imported):
        prov = dev.provenance
        assert dev.calibration.provenance == prov and dev.calibration.source == "trace"
        caption = prov.caption()
        for part in (dev.name, prov.date, prov.torch, "held-out error", "plain roofline"):
            assert part in caption
        assert prov.trace_file.startswith("gpu_traces/traces/")
        assert (REPO / prov.trace_file).exists()
        kinds = {p.kind for p in dev.points}
        assert {"copy", "big-gemm", "gemm", "elementwise"} <= kinds
        assert {p.split for p in dev.points} == {"train", "heldout"}
        for p in dev.points:
            assert p.time_s > 0 and p.model_s > 0 and p.roofline_s > 0
            assert p.p25_s <= p.time_s <= p.p75_s
            assert p.label and isinstance(p.shape, dict)
        gemm = dev.points_of("gemm")
        assert all({"m", "n", "k", "model", "layer"} <= set(p.shape) for p in gemm)
        assert C.recorded_device(dev.slug) is dev


def test_stored_errors_match_the_points(shipped):
    """The held-out errors a file states are those of its calibration on the trace's held-out
    points. A recorded file ships one model's GEMMs and every other point, so the errors are
    recomputed from the trace itself (imported devices: leave one model out, tested elsewhere)."""
    from gpu_traces.schema import load_trace
    for dev in (d for d in shipped if not d.provenance.imported):
        rows = calibrate._point_rows(load_trace(REPO / dev.provenance.trace_file))
        shown = [p for p in dev.points if p.split == "heldout"]
        held_rows = [r for r in rows if r["split"] == "heldout"]
        assert len(held_rows) == dev.provenance.n_heldout and len(rows) == dev.provenance.n_points
        assert 0 < len(shown) <= len(held_rows)
        assert {p.label for p in shown} <= {r["label"] for r in held_rows}
        pred, plain = kernel_model.predict_rows(dev.calibration, held_rows)
        meas = np.array([r["time_s"] for r in held_rows])
        model, roof = np.abs(pred - meas) / meas, np.abs(plain - meas) / meas
        assert np.median(model) == pytest.approx(dev.provenance.heldout_median_rel_err, rel=1e-3)
        assert np.max(model) == pytest.approx(dev.provenance.heldout_max_rel_err, rel=1e-3)
        assert np.median(roof) == pytest.approx(dev.provenance.roofline_heldout_median_rel_err,
                                                rel=1e-3)
        assert np.max(roof) == pytest.approx(dev.provenance.roofline_heldout_max_rel_err, rel=1e-3)


def test_calibrated_model_beats_plain_roofline_on_heldout_points(shipped):
    # the guide's claim, checked on every shipped measurement
    for dev in shipped:
        p = dev.provenance
        assert p.heldout_median_rel_err < p.roofline_heldout_median_rel_err, p.caption()


def test_cpu_calibration_describes_the_cpu(shipped):
    for dev in (d for d in shipped if d.device_type == "cpu"):
        assert dev.catalogue_key is None and dev.arch is None and dev.efficiency is None
        assert "CPU" in dev.name and dev.slug.startswith("cpu-")
        assert dev.provenance.cuda is None
        assert set(dev.calibration.flops_per_s) >= {"bf16"}


def test_calibration_files_are_checked_on_load(tmp_path):
    src = next(C.CALIBRATION_DIR.glob("*.json"))
    data = json.loads(src.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "format_version": 99}))
    with pytest.raises(C.CalibrationFileError, match=r"bad\.json: format_version 99 is not supported"):
        C.load_calibration_file(bad)
    bad.write_text(src.read_text()[:500])
    with pytest.raises(C.CalibrationFileError, match=r"bad\.json: not valid JSON"):
        C.load_calibration_file(bad)
    broken = {**data, "calibration": {**data["calibration"]}}
    del broken["calibration"]["gemm"]
    bad.write_text(json.dumps(broken))
    with pytest.raises(C.CalibrationFileError, match=r"bad\.json: malformed calibration .*gemm"):
        C.load_calibration_file(bad)


def test_calibration_module_stays_browser_safe():
    code = ("import sys; import sim.calibration as c; c.recorded_devices(); "
            "bad = [m for m in ('torch', 'jsonschema', 'scipy', 'gpu_traces') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
