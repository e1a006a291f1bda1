"""The project's own documents stay true: the README short and linking every page of docs/,
every relative link resolving, every command they name existing, and ARCHITECTURE.md
naming every module of sim/, builder/ and gpu_traces/.

(The quality table of docs/model-quality.md is checked against the report command by
tests/test_calibration_quality.py.)"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md", ROOT / "BENCHMARKS.md",
         ROOT / "gpu_traces" / "README.md", *DOCS]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short_and_links_every_page_of_docs():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move a section to docs/"
    links = set(LINK.findall(README.read_text()))
    assert len(DOCS) >= 5
    for page in DOCS:
        assert f"docs/{page.name}" in links, f"README.md does not link docs/{page.name}"
    for name in ("ARCHITECTURE.md", "CONTRIBUTING.md", "BENCHMARKS.md"):
        assert name in links, name


def test_the_readme_gives_the_two_commands_ci_runs():
    text = README.read_text()
    assert "./dev serve" in text and "./dev test" in text
    assert "exec ./dev test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}, which is not there"


def named(pattern: str) -> set[str]:
    found = set()
    for page in PAGES:
        found |= set(re.findall(pattern, page.read_text()))
    return found


def test_every_dev_command_named_exists():
    dev = (ROOT / "dev").read_text()
    commands = set(re.findall(r"^\s{4}([a-z]+)\)", dev, re.M))
    used = named(r"\./dev ([a-z]+)")
    assert used and used <= commands, used - commands


def test_every_python_module_named_runs_as_a_command():
    """`python -m X` in a document: X is a module of the repository with a command line."""
    used = {m for m in named(r"python -m ((?:sim|widgets|gpu_traces|builder)(?:\.[a-z_]+)*)")}
    assert "gpu_traces.calibrate" in used and "widgets" in used
    for module in sorted(used):
        path = ROOT / module.replace(".", "/")
        source = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__main__.py"
        assert source.is_file(), f"python -m {module}: no {source.relative_to(ROOT)}"
        assert '__name__ == "__main__"' in source.read_text() or source.name == "__main__.py", module


def test_every_test_file_named_exists():
    for rel in sorted(named(r"\b(tests/[a-z_]+\.py)\b")):
        assert (ROOT / rel).is_file(), rel


def test_architecture_names_every_module():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for room in ("sim", "builder", "gpu_traces"):
        for path in sorted((ROOT / room).glob("*.py")):
            if path.name != "__init__.py":
                assert path.name in text, f"ARCHITECTURE.md does not name {room}/{path.name}"


def test_the_commands_print_their_help():
    """The commands the documents teach start: each prints its --help and exits 0."""
    for args in (["build.py"], ["-m", "widgets"], ["-m", "gpu_traces.calibrate"], ["-m", "gpu_traces.schema"]):
        p = subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and "usage:" in p.stdout, (args, p.stderr)


CONVENTION_FROM = "1bb9922"        # the last commit before CONTRIBUTING.md's convention


def test_commit_subjects_since_the_convention_fit_a_log_line():
    """CONTRIBUTING.md: a subject says what changed in at most 72 characters."""
    p = subprocess.run(["git", "log", "--format=%h %s", f"{CONVENTION_FROM}..HEAD"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        pytest.skip(f"no history to read here ({p.stderr.strip()[:80]})")
    long = [line for line in p.stdout.splitlines() if len(line.split(" ", 1)[1]) > 72]
    assert long == [], long
