"""sim.model_check: the shipped kernel timings against the model, as chapter 14's figure shows them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim import calibration
from sim.model_check import OP_GROUPS, ModelCheckParams, check_model, device_choices, ratios_below


def test_every_shipped_device_is_a_choice():
    assert sorted(device_choices().values()) == sorted(d.slug for d in calibration.recorded_devices())


def test_heldout_errors_are_the_calibration_files_own():
    """The H100 table rows are the leave-one-model-out numbers the calibration file stores
    (and the quality table of docs/model-quality.md prints): linear layers 4.9% median, 46% worst."""
    data = json.loads((calibration.CALIBRATION_DIR / "h100-sxm.json").read_text())
    lomo = data["fit"]["leave_one_model_out"]
    r = check_model(ModelCheckParams(device="h100-sxm", op="all"))
    rows = {e.op: e for e in r.heldout_errors}
    assert set(rows) == {*lomo["by_op"], "all"}
    lin = rows["linear"]
    assert (lin.n, lin.model_median, lin.model_max) == (2772, 0.04923, 0.4648)
    assert lin.roofline_median == lomo["by_op"]["linear"]["roofline"]["median_rel_err"]
    assert rows["all"].n == data["fit"]["n_points"]


def test_points_split_into_op_groups_and_ratios_are_predicted_over_measured():
    for slug in device_choices().values():
        everything = check_model(ModelCheckParams(device=slug, op="all"))
        parts = [check_model(ModelCheckParams(device=slug, op=op)) for op in OP_GROUPS]
        assert sum(p.n_points for p in parts) == everything.n_points == len(everything.labels)
        np.testing.assert_allclose(everything.model_ratio * everything.measured_s, everything.model_s)
        np.testing.assert_allclose(everything.roofline_ratio * everything.measured_s, everything.roofline_s)


def test_cpu_trace_marks_its_heldout_points():
    r = check_model(ModelCheckParams(device="cpu-amd-epyc-1-thread", op="all"))
    assert not r.imported and 0 < r.heldout.sum() < r.n_points
    assert r.spec_sheet_median is None and r.allreduce_latency_s is None
    assert "held-out share" in r.heldout_method


def test_small_gpu_kernels_fall_below_the_plain_roofline():
    """On the H100 the plain roofline under-predicts the matrix multiplications that took
    under 20 us (streaming below the copy bandwidth); the calibrated model does not."""
    n, roof, model = ratios_below(check_model(), 20e-6)
    assert n >= 5 and roof < 0.85 and abs(model - 1) < 0.1


def test_a_device_without_such_kernels_shows_none():
    r = check_model(ModelCheckParams(device="a100-80gb", op="attention"))
    assert r.n_points == 0 and np.isnan(r.shown_model_median)


@pytest.mark.parametrize("field,value,match", [("device", "b200", "valid devices: "), ("op", "gemm", "valid ops: all")])
def test_bad_choices_are_named(field, value, match):
    with pytest.raises(ValueError, match=match):
        ModelCheckParams(**{field: value})
