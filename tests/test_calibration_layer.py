"""The per-layer GEMM overlay read from the shipped trace calibration."""
import numpy as np
import pytest

from sim import batching, calibration


@pytest.fixture(scope="module", params=["cpu-amd-epyc-1-thread", "h100-sxm"])
def device(request):
    return calibration.recorded_device(request.param)


def test_layer_sums_are_the_sums_of_the_recorded_kernels(device):
    model = next(p.shape["model"] for p in device.points_of("gemm"))
    r = batching.layer_gemm_measurements(device, model)
    assert list(r.tokens) == sorted(r.tokens) and len(r.tokens) >= 4
    assert r.dtype == ("fp16" if device.provenance.imported else "bf16")
    m = int(r.tokens[len(r.tokens) // 2])
    four = [p for p in device.points_of("gemm")
            if p.shape["model"] == model and p.dtype == r.dtype and p.shape["m"] == m]
    assert sorted(p.shape["layer"] for p in four) == sorted(batching.LAYER_GEMMS)
    i = list(r.tokens).index(m)
    assert r.measured_s[i] == pytest.approx(sum(p.time_s for p in four), rel=1e-12)
    assert r.model_s[i] == pytest.approx(sum(p.model_s for p in four), rel=1e-12)
    assert r.roofline_s[i] == pytest.approx(sum(p.roofline_s for p in four), rel=1e-12)
    if not device.provenance.imported:         # imported profiles publish no quartiles
        assert np.all(r.measured_p25_s <= r.measured_s) and np.all(r.measured_s <= r.measured_p75_s)
    assert r.device == device.name and r.caption == device.provenance.caption()


def test_calibrated_model_tracks_the_layer_better_than_the_plain_roofline(device):
    model = next(p.shape["model"] for p in device.points_of("gemm"))
    r = batching.layer_gemm_measurements(device, model)
    err = lambda pred: np.median(np.abs(pred - r.measured_s) / r.measured_s)   # noqa: E731
    assert err(r.model_s) < err(r.roofline_s)


def test_unknown_model_or_dtype_is_a_clear_error(device):
    with pytest.raises(ValueError, match="no recorded GEMMs of no-such-model"):
        batching.layer_gemm_measurements(device, "no-such-model")
