"""How `python -m gpu_traces.calibrate` writes and checks its files (no fitting here: the
fitted texts are stubbed, the file handling is real)."""
from __future__ import annotations

import json
import os

import pytest

from gpu_traces import calibrate, leave_out
from sim import kernel_model
from tests.synthetic import synthesize_trace

GOOD = {"h200.json": json.dumps({"generated_by": calibrate.GENERATOR, "n": 1}) + "\n"}


@pytest.fixture
def stub_fit(monkeypatch):
    monkeypatch.setattr(calibrate, "build_calibrations", lambda traces, log=print, jobs=None: dict(GOOD))


def _run(tmp_path, *args):
    (tmp_path / "traces").mkdir(exist_ok=True)
    return calibrate.main(["--traces", str(tmp_path / "traces"), "--out", str(tmp_path / "cal"),
                           *args])


def test_check_passes_after_calibrate(tmp_path, stub_fit):
    assert _run(tmp_path) == 0
    assert (tmp_path / "cal" / "h200.json").read_text() == GOOD["h200.json"]
    assert _run(tmp_path, "--check") == 0


def test_a_stray_hand_made_file_gets_advice_that_fixes_it(tmp_path, stub_fit, capsys):
    assert _run(tmp_path) == 0
    (tmp_path / "cal" / "mine.json").write_text('{"calibration": {}}')
    capsys.readouterr()
    assert _run(tmp_path, "--check") == 1
    err = capsys.readouterr().err
    assert "mine.json" in err and "not written by" in err and "Delete it" in err
    assert "out of date" not in err          # "run calibrate" would not remove it
    # calibrating leaves it (it is not ours to delete) and says so
    assert _run(tmp_path) == 0
    assert "warning: mine.json" in capsys.readouterr().err
    assert (tmp_path / "cal" / "mine.json").exists()
    # once deleted, the check passes: the advice was right
    (tmp_path / "cal" / "mine.json").unlink()
    assert _run(tmp_path, "--check") == 0


def test_a_generated_file_no_trace_produces_is_stale_and_removed(tmp_path, stub_fit, capsys):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "old.json").write_text(json.dumps({"generated_by": calibrate.GENERATOR}))
    assert _run(tmp_path, "--check") == 1
    assert "out of date: h200.json, old.json; run" in capsys.readouterr().err
    assert _run(tmp_path) == 0 and not (tmp_path / "cal" / "old.json").exists()


def test_a_full_disk_leaves_the_old_file_whole(tmp_path, stub_fit, monkeypatch, capsys):
    (tmp_path / "cal").mkdir()
    old = json.dumps({"generated_by": calibrate.GENERATOR, "n": 0}) + "\n"
    (tmp_path / "cal" / "h200.json").write_text(old)

    def no_space(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(calibrate.os, "fsync", no_space)
    assert _run(tmp_path) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert (tmp_path / "cal" / "h200.json").read_text() == old
    assert sorted(os.listdir(tmp_path / "cal")) == ["h200.json"]     # no temporary left


def test_a_gpu_outside_the_catalogue_is_calibrated_with_a_warning(tmp_path, monkeypatch):
    truth = kernel_model.Calibration(device="made-up", source="trace", bandwidth_bytes_per_s=6e11,
                                    flops_per_s={"bf16": 1e14, "fp8": 2e14},
                                    launch_overhead_s=5e-6, note="", compute_units=80)
    trace = synthesize_trace(truth, suite="cuda-quick", device_name="NVIDIA A10G")
    trace.pop("synthetic")                 # stands in for a recorded trace of an A10G
    (tmp_path / "nvidia-a10g").mkdir()
    (tmp_path / "nvidia-a10g" / "t.json").write_text(json.dumps(trace))
    err = {"median_rel_err": 0.0, "max_rel_err": 0.0}
    monkeypatch.setattr(calibrate, "fit_trace", lambda trace, rel: {
        "fit": {"heldout": {"n": 1, "model": err, "roofline": err}}})
    monkeypatch.setattr(calibrate, "dumps", json.dumps)
    logged = []
    calibrate.build_calibrations(tmp_path, root=tmp_path, log=logged.append)
    warning = next(line for line in logged if line.startswith("warning"))
    assert "no catalogue GPU is named 'NVIDIA A10G'" in warning
    assert "no catalogue GPU takes its numbers from it" in warning


def test_jobs_reach_the_fit_and_none_is_refused(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(calibrate, "build_calibrations",
                        lambda traces, log=print, jobs=None: asked.append(jobs) or dict(GOOD))
    assert _run(tmp_path, "--jobs", "3") == 0 and _run(tmp_path) == 0
    assert asked == [3, None]                  # None: as many as the machine has cores
    with pytest.raises(SystemExit) as e:
        _run(tmp_path, "--jobs", "0")
    assert e.value.code == 2 and asked == [3, None]


def test_folds_run_in_other_processes_in_order_or_here_when_none_can_start(monkeypatch):
    here = os.getpid()
    pids = calibrate.in_processes(os.getpid, [()] * 3, jobs=2)
    assert len(pids) == 3 and here not in pids
    assert calibrate.in_processes(divmod, [(7, 2), (9, 4), (1, 5)], jobs=2) == [(3, 1), (2, 1), (0, 1)]
    with pytest.raises(ZeroDivisionError):     # an error in a fit is not taken for "no processes"
        calibrate.in_processes(divmod, [(1, 1), (1, 0)], jobs=2)
    assert calibrate.in_processes(os.getpid, [()] * 2, jobs=1) == [here, here]

    def no_processes(*a, **k):
        raise OSError("no processes in this sandbox")
    monkeypatch.setattr(leave_out, "ProcessPoolExecutor", no_processes)
    assert calibrate.in_processes(os.getpid, [()] * 2, jobs=2) == [here, here]
