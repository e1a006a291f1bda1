"""The fit: it recovers known parameters from traces the model itself made up, reports its
held-out error honestly, and the shipped calibrations are exactly what it produces."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpu_traces import calibrate, fitting
from gpu_traces.calibrate import fit_line, fit_trace, nelder_mead
from sim import calibration as C
from sim import kernel_model
from tests.synthetic import synthesize_trace

REPO = Path(__file__).resolve().parent.parent

TRUTH = kernel_model.Calibration(
    device="made-up Hopper", source="trace", bandwidth_bytes_per_s=4.0e12,
    flops_per_s={"bf16": 7.0e14, "fp8": 1.3e15}, launch_overhead_s=3e-6, note="",
    # m_half = 64: large enough to be seen beside the weight reads (about a third of them)
    gemm={"bf16": kernel_model.GemmShapeParams(0.9, 0.8, 128, 128, 3.0, half_rate_tokens=64.0),
          "fp8": kernel_model.GemmShapeParams(0.85, 0.75, 64, 256, 2.5, fixed_s=1e-6,
                                              fixed_m_s=3e-6, fixed_half_tokens=32.0,
                                              k_step_s=2e-10)},
    attention={"flash": kernel_model.RooflineParams(0.6, 0.7, 4.0, 5e-6),
               "efficient": kernel_model.RooflineParams(0.45, 0.6, 3.0, 8e-6),
               "math": kernel_model.RooflineParams(0.2, 0.3, 2.0, 2e-5, score_traffic=3.0)},
    elementwise={"rms_norm": kernel_model.LineParams(8e-6, 0.6), "silu_mul": kernel_model.LineParams(6e-6, 0.5),
                 "residual_add": kernel_model.LineParams(3e-6, 0.9)},
    compute_units=132, default_attention_backend="flash")


@pytest.fixture(scope="module")
def exact_fit():
    return fit_trace(synthesize_trace(TRUTH, device_name="NVIDIA H200"), "synthetic.json")


@pytest.fixture(scope="module")
def noisy_fit():
    trace = synthesize_trace(TRUTH, device_name="NVIDIA H200", noise=0.03, seed=7)
    return fit_trace(trace, "synthetic.json")


def test_fit_recovers_peaks_and_launch(exact_fit):
    c = exact_fit["calibration"]
    assert c["launch_overhead_s"] == pytest.approx(3e-6, rel=1e-3)
    assert c["bandwidth_bytes_per_s"] == pytest.approx(4.0e12, rel=1e-4)
    assert c["compute_units"] == 132


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_fit_recovers_gemm_shape_terms(exact_fit, noisy_fit, dtype):
    true = TRUTH.gemm[dtype]
    for data, tol in ((exact_fit, 0.01), (noisy_fit, 0.04)):
        c = data["calibration"]
        g = c["gemm"][dtype]
        assert (g["tile_m"], g["tile_n"]) == (true.tile_m, true.tile_n)
        # the square GEMMs define F, so alpha is relative to them: compare alpha * F
        assert g["compute_efficiency"] * c["flops_per_s"][dtype] == pytest.approx(
            true.compute_efficiency * TRUTH.flops(dtype), rel=tol)
        assert g["bandwidth_efficiency"] * c["bandwidth_bytes_per_s"] == pytest.approx(
            true.bandwidth_efficiency * TRUTH.bandwidth_bytes_per_s, rel=tol)
        assert g["smoothness"] == pytest.approx(true.smoothness, rel=5 * tol)
        assert g["half_rate_tokens"] == pytest.approx(true.half_rate_tokens, rel=10 * tol,
                                                      abs=0.5)
        # the overheads no roofline term explains: start-up (small m, and what the kernels
        # used with many tokens add) and the walk along K; zero where the truth has none
        assert g["fixed_s"] == pytest.approx(true.fixed_s, rel=10 * tol, abs=1e-7)
        assert g["fixed_m_s"] == pytest.approx(true.fixed_m_s, rel=10 * tol, abs=1e-7)
        assert g["k_step_s"] == pytest.approx(true.k_step_s, rel=10 * tol, abs=1e-11)
        if true.fixed_m_s:
            assert g["fixed_half_tokens"] == pytest.approx(true.fixed_half_tokens, rel=20 * tol)


@pytest.mark.parametrize("backend", ["flash", "efficient", "math"])
def test_fit_recovers_attention_terms(exact_fit, backend):
    c = exact_fit["calibration"]
    a, true = c["attention"][backend], TRUTH.attention[backend]
    assert a["compute_efficiency"] * c["flops_per_s"]["bf16"] == pytest.approx(
        true.compute_efficiency * TRUTH.flops("bf16"), rel=0.02)
    assert a["bandwidth_efficiency"] == pytest.approx(true.bandwidth_efficiency, rel=0.02)
    assert a["fixed_s"] == pytest.approx(true.fixed_s, rel=0.1)
    # the unfused math backend moves its score matrix through memory, the fused ones do not
    assert a["score_traffic"] == pytest.approx(true.score_traffic, rel=0.05, abs=0.01)
    assert c["default_attention_backend"] == "flash"


@pytest.mark.parametrize("op", ["rms_norm", "silu_mul", "residual_add"])
def test_fit_recovers_elementwise_lines(exact_fit, op):
    e, true = exact_fit["calibration"]["elementwise"][op], TRUTH.elementwise[op]
    assert e["bandwidth_efficiency"] == pytest.approx(true.bandwidth_efficiency, rel=1e-3)
    # the held-out points are missing from the line fit but it is exact, so the
    # intercept (the fixed cost beyond launch + bytes) comes back too
    assert e["fixed_s"] == pytest.approx(true.fixed_s, rel=1e-2)


def test_heldout_error_reported_against_plain_roofline(exact_fit, noisy_fit):
    for data, limit in ((exact_fit, 0.005), (noisy_fit, 0.05)):
        fit = data["fit"]
        held = fit["heldout"]
        assert held["n"] >= 0.2 * fit["n_points"]
        assert held["model"]["median_rel_err"] < limit
        # the made-up device has shape effects a plain roofline cannot see
        assert held["roofline"]["median_rel_err"] > 4 * held["model"]["median_rel_err"]
        assert held["roofline"]["max_rel_err"] > 0.5
        assert fit["by_kind"]["gemm"]["heldout"]["n"] > 50
        assert fit["by_kind"]["copy"]["heldout"]["n"] == 0        # anchors always train


def test_catalogue_gpu_gets_efficiencies_against_its_spec_sheet(exact_fit):
    from sim import hardware
    h200 = hardware.get("H200")
    dev, c = exact_fit["device"], exact_fit["calibration"]
    assert (dev["catalogue_key"], dev["arch"], dev["slug"]) == ("H200", "hopper", "h200")
    assert c["efficiency"]["bandwidth"] == pytest.approx(4.0e12 / h200.hbm_bandwidth_bytes_per_s,
                                                        rel=1e-4)
    assert set(c["efficiency"]["flops"]) == {"bf16", "fp8"}
    assert exact_fit["fit"]["spec_sheet_heldout"]["median_rel_err"] > 0


def test_unknown_gpu_calibrates_for_itself_only():
    data = fit_trace(synthesize_trace(TRUTH, device_name="NVIDIA A10G", suite="cuda-quick"),
                     "a10g.json")
    assert data["device"]["slug"] == "nvidia-a10g"
    assert data["device"]["catalogue_key"] is None and data["calibration"]["efficiency"] is None
    dev = C.calibration_from_dict(data)
    assert dev.calibration.source == "trace" and dev.points


def test_fit_split_is_stable_and_about_a_quarter():
    labels = [f"llama-3.1-8b qkv_proj m={m}" for m in range(1, 2001)]
    held = [calibrate.heldout("gemm", "bf16", None, lab) for lab in labels]
    assert held == [calibrate.heldout("gemm", "bf16", None, lab) for lab in labels]
    assert 0.22 < sum(held) / len(held) < 0.28
    assert not calibrate.heldout("copy", "fp32", None, "copy 4 KiB")


def test_nelder_mead_finds_a_quadratic_minimum():
    x, val = nelder_mead(lambda v: float((v[0] - 1.5) ** 2 + 10 * (v[1] + 2.0) ** 2 + 0.25),
                         [0.0, 0.0])
    assert x == pytest.approx([1.5, -2.0], abs=1e-4)
    assert val == pytest.approx(0.25, abs=1e-8)


def test_fit_line_recovers_a_line_and_clamps_negative_intercepts():
    nbytes = np.array([1e3, 1e5, 1e7, 1e9])
    fixed, rate = fit_line(nbytes, 2e-6 + nbytes / 5e11)
    assert (fixed, rate) == (pytest.approx(2e-6, rel=1e-9), pytest.approx(5e11, rel=1e-9))
    fixed, rate = fit_line(nbytes[1:], nbytes[1:] / 5e11 - 1e-9)
    assert fixed == 0.0 and rate == pytest.approx(5e11, rel=0.05)


def test_output_is_deterministic(exact_fit):
    again = fit_trace(synthesize_trace(TRUTH, device_name="NVIDIA H200"), "synthetic.json")
    assert calibrate.dumps(again) == calibrate.dumps(exact_fit)


def test_synthetic_traces_are_refused_as_shipped_traces(tmp_path):
    d = tmp_path / "h200"
    d.mkdir()
    (d / "t.json").write_text(json.dumps(synthesize_trace(TRUTH, suite="cuda-quick")))
    with pytest.raises(calibrate.CalibrationError, match="synthetic trace"):
        calibrate.build_calibrations(tmp_path, log=lambda s: None)


# ---- the shipped calibrations --------------------------------------------------------

def _close(a, b, path="") -> list[str]:
    """Differences between two parsed JSON values (floats to 1e-6 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-15) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_shipped_calibrations_are_what_calibrate_produces():
    files = calibrate.build_calibrations(log=lambda s: None)
    shipped = {p.name: p for p in C.CALIBRATION_DIR.glob("*.json")}
    assert set(files) == set(shipped), "run `python -m gpu_traces.calibrate`"
    for name, text in files.items():
        diffs = _close(json.loads(text), json.loads(shipped[name].read_text()))
        assert not diffs, f"{name} is stale (run `python -m gpu_traces.calibrate`): {diffs[:5]}"
    # (byte-identical output for the same input: test_output_is_deterministic; one refit of
    # every shipped trace, leave-one-model-out folds included, is all this test affords)


def test_shipped_calibrations_are_small():
    for p in C.CALIBRATION_DIR.glob("*.json"):
        assert p.stat().st_size < 300_000, f"{p.name} is {p.stat().st_size} bytes"


def test_own_recording_of_a_gpu_wins_over_an_import_of_it(tmp_path):
    from gpu_traces import import_profiles
    excerpt = REPO / "tests" / "fixtures" / "vidur-excerpt"
    net = excerpt / "data/profiling/network/h100_dgx/all_reduce.csv"
    assert import_profiles.main(["vidur", str(net), "--commit", "7d47513", "--commit-date",
                                 "2024-11-19T13:53:02Z", "--out", str(tmp_path / "imported")]) == 0
    # a stand-in for a project recording of an H100: the made-up device under the name an
    # H100 SXM reports (the `synthetic` mark removed only inside this test's folder)
    own = synthesize_trace(TRUTH, suite="cuda-quick", device_name="NVIDIA H100 80GB HBM3")
    del own["synthetic"]
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "t.json").write_text(json.dumps(own))
    lines = []
    files = calibrate.build_calibrations(tmp_path, root=tmp_path, log=lines.append)
    assert list(files) == ["h100-sxm.json"]
    data = json.loads(files["h100-sxm.json"])
    assert data["trace"]["file"] == "h100/t.json" and "source" not in data["trace"]
    assert any("not used" in s and "imported" in s for s in lines)


@pytest.mark.slow
def test_the_fit_does_not_follow_last_bit_noise(monkeypatch):
    """numpy's exp/log/power differ in their last bits between CPUs (SIMD code or libm), and
    along a parameter the loss barely depends on (this trace's flash-attention smoothness)
    such noise once steered Nelder-Mead elsewhere: another machine's calibration differed
    from the shipped one. Losses are compared at LOSS_DIGITS digits, so a perturbation of a
    few units in the last place leaves the whole calibration as it was."""
    from gpu_traces.schema import load_trace

    path = next((calibrate.TRACES_DIR / "cpu-amd-epyc-1-thread").glob("*.json"))
    trace = load_trace(path)
    plain = fit_trace(trace, path.name)["calibration"]
    loss = fitting._log_loss

    def noisy(pred, meas):
        v = loss(pred, meas)
        wobble = (int.from_bytes(np.float64(v).tobytes(), "little") * 2654435761 >> 7) % 5 - 2
        return v * (1.0 + 2.3e-16 * wobble)
    monkeypatch.setattr(fitting, "_log_loss", noisy)
    assert fit_trace(trace, path.name)["calibration"] == plain


def test_the_default_attention_backend_is_the_one_torch_picked():
    """The recorder stores, per attention shape, the backend torch itself picks; the fit's
    default is the most common of them among the backends it fitted, else a fixed order."""
    def rows(picks):
        return [{"kind": "attention-decode", "shape": {"default_backend": b}} for b in picks] + [
            {"kind": "gemm", "shape": {}}]
    fitted = {"flash": {}, "cudnn": {}, "math": {}}
    assert calibrate.torch_default_backend(rows(["cudnn", "cudnn", "flash"]), fitted) == "cudnn"
    assert calibrate.torch_default_backend(rows(["flash", "cudnn", "flash"]), fitted) == "flash"
    # a pick the fit has no parameters for, or none recorded (older traces): no opinion
    assert calibrate.torch_default_backend(rows(["efficient"]), fitted) is None
    assert calibrate.torch_default_backend(rows([None, None]), fitted) is None
