"""Every command of the guide answers bad input and interrupts with one line on stderr and
no traceback: exit status 2 for a usage error, 128 + the signal for a stop; and an export
stopped at any point leaves its folder as it was (or, stopped while moving its files in,
holds the new export whole).

The commands run as a reader runs them, in subprocesses of the test environment's Python."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FIGURE = "ch03-hierarchy"          # the export tests' figure: one picture per state, quick to draw


def run(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def assert_one_line(p: subprocess.CompletedProcess, status: int, *words: str) -> str:
    """`p` exited with `status`, said nothing on stdout, and one line on stderr with `words`."""
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert p.returncode == status and len(lines) == 1 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# (the settings after `serve`, what the line must name) - the cases a new reader tried
SERVE_CASES = [
    (["ch12-parallel", "users=NaN"], "users accepts an integer from 1 to 256"),
    (["ch12-parallel", "users=300"], "users=300 is not valid (out of range)"),
    (["ch12-parallel", "users=-1"], "users accepts an integer from 1 to 256"),
    (["ch12-parallel", "users=1e400"], "users accepts an integer from 1 to 256"),
    (["ch12-parallel", "users=１２"], "users='１２' is not valid"),
    (["ch12-parallel", "users=" + "9" * 100_000], "(100,000 characters)"),
    (["ch12-parallel", "gpu=H999"], "gpu accepts one of 'H100-SXM'"),
    (["ch12-parallel", "gpu="], "gpu accepts one of"),
    (["ch12-parallel", "nosuch=1"], "has no control 'nosuch'"),
    (["ch12-parallel", "no-such-state"], "has no named state 'no-such-state'"),
    (["ch99-nothing"], "unknown figure 'ch99-nothing'"),
    (["ch12-parallel", "<script>alert(1)</script>=1"], "has no control"),
    (["ch12-parallel", "--port", "abc"], "invalid int value: 'abc'"),
]


@pytest.mark.parametrize("settings, names", SERVE_CASES, ids=lambda x: str(x)[:40] if isinstance(x, list) else None)
def test_widgets_serve_with_a_bad_state_says_one_line(settings, names):
    p = run("-m", "widgets", "serve", *settings, "--port", "1")
    assert_one_line(p, 2, "python -m widgets", names)


@pytest.mark.parametrize("args, names", [
    (["--chapters", "three"], "'three' is not a list of chapter numbers"),
    (["--figures", FIGURE], "--figures is for --export"),
    (["--no-build", "--export", "--figures", "ch99-nothing"], "unknown figure 'ch99-nothing'"),
    (["--no-build", "--export", "--export-dir", "/proc/exports"], "/proc"),
    (["--nonsense"], "unrecognized arguments: --nonsense"),
])
def test_build_py_usage_errors_say_one_line(args, names):
    assert_one_line(run("build.py", *args), 2, names)


def test_an_export_dir_that_is_a_file_or_under_one_says_one_line(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    line = assert_one_line(run("build.py", "--no-build", "--export", "--export-dir", str(a_file)), 2)
    assert f"{a_file} is a file, not a folder" in line
    line = assert_one_line(run("build.py", "--no-build", "--export", "--export-dir", str(a_file / "sub")), 2)
    assert f"{a_file} is a file, so no folder can be made under it" in line
    assert a_file.read_text() == "keep me"


def test_an_export_into_a_folder_with_a_foreign_index_json_keeps_everything(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "index.json").write_text('{"name": "my project"}')
    (project / "src" / "app.py").write_text("print('mine')")
    before = snapshot_of(project)
    line = assert_one_line(run("build.py", "--no-build", "--export", "--export-dir", str(project)), 2)
    assert f"{project} is not empty and holds no export of this guide" in line
    assert snapshot_of(project) == before and sorted(os.listdir(tmp_path)) == ["project"]


@pytest.mark.parametrize("args, names", [
    (["gpu_traces.calibrate", "--traces", "/no/such/folder"], "--traces /no/such/folder: not a folder of traces"),
    (["gpu_traces.calibrate", "--report", "--out", "/no/such/folder"], "not a folder of calibrations"),
    (["gpu_traces.calibrate", "--jobs", "0"], "--jobs must be 1 or more"),
    (["gpu_traces.schema", "--migrate", "/no/such/trace.json"], "/no/such/trace.json: cannot be read"),
    (["gpu_traces.schema"], "the following arguments are required: --migrate"),
])
def test_gpu_traces_commands_say_one_line(args, names):
    assert_one_line(run("-m", *args), 2, names)


def test_a_trace_that_is_not_json_is_named_and_left_as_it_was(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text('{"schema_version": 1, "measurements": [')
    assert_one_line(run("-m", "gpu_traces.schema", "--migrate", str(trace)), 2, f"{trace}: not JSON")
    assert trace.read_text() == '{"schema_version": 1, "measurements": ['


def test_dev_names_its_commands_for_an_unknown_one():
    p = subprocess.run([str(ROOT / "dev"), "nonsense"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "./dev test" in p.stdout and "Traceback" not in p.stderr


# ---- real exports, stopped: these start Chromium

def snapshot_of(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def export(folder: Path, fault: str = "", **kw) -> subprocess.CompletedProcess:
    return run("build.py", "--no-build", "--export", "--figures", FIGURE, "--export-dir", str(folder),
               env={"GUIDE_BUILD_FAULT": fault}, timeout=300, **kw)


@pytest.fixture(scope="module")
def earlier_export(tmp_path_factory) -> Path:
    """A finished export of FIGURE, with a reader's own file beside it."""
    folder = tmp_path_factory.mktemp("earlier") / "exports"
    p = export(folder)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    (folder / "my-notes.md").write_text("the reader's own file")
    return folder


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("fault, signame", [("export-figure:SIGINT", "SIGINT"), ("export-figure:SIGTERM", "SIGTERM"),
                                            ("export-staged:SIGTERM", "SIGTERM"), ("export-staged:SIGINT", "SIGINT")])
def test_an_export_stopped_before_its_move_leaves_the_earlier_export_byte_identical(earlier_export, fault, signame):
    before = snapshot_of(earlier_export)
    p = export(earlier_export, fault)
    line = assert_one_line_after_log(p, 128 + signal.Signals[signame], f"interrupted ({signame})", "is as it was")
    assert str(earlier_export) in line
    assert snapshot_of(earlier_export) == before
    assert sorted(os.listdir(earlier_export.parent)) == ["exports"]        # no staging folder left


@pytest.mark.browser
@pytest.mark.slow
def test_an_export_stopped_while_moving_its_files_in_finishes_the_move(earlier_export, tmp_path):
    folder = tmp_path / "exports"
    subprocess.run(["cp", "-a", str(earlier_export), str(folder)], check=True)
    p = export(folder, "export-moving:SIGINT")
    assert_one_line_after_log(p, 130, "interrupted (SIGINT)", "holds the new export, whole")
    manifest = json.loads((folder / "export-manifest.json").read_text())
    files = snapshot_of(folder)
    assert {n: files[n] for n in manifest["files"]} == {n: f["sha256"] for n, f in manifest["files"].items()}
    assert (folder / "my-notes.md").read_text() == "the reader's own file"
    assert sorted(os.listdir(tmp_path)) == ["exports"]


@pytest.mark.browser
@pytest.mark.slow
def test_ctrl_c_in_a_terminal_during_a_new_export_leaves_no_folder(tmp_path):
    """Ctrl-C reaches the whole process group, Chromium's driver too; one line, no folder."""
    folder = tmp_path / "exports"
    proc = subprocess.Popen([PY, "build.py", "--no-build", "--export", "--figures", FIGURE, "--export-dir",
                             str(folder)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(tmp_path.glob(".exports.export-*/*.html")) and time.monotonic() < deadline:
        time.sleep(0.05)                                              # Chromium is drawing
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_line_after_log(p, 130, "interrupted (SIGINT)", "is as it was")
    assert os.listdir(tmp_path) == []


def assert_one_line_after_log(p: subprocess.CompletedProcess, status: int, *words: str) -> str:
    """As assert_one_line, for a command that logs its progress on stdout first."""
    return assert_one_line(subprocess.CompletedProcess(p.args, p.returncode, "", p.stderr), status, *words)
