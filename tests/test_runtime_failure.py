"""A runtime file missing or damaged never leaves a figure loading: within 15 s the figure
shows its error state, and the message names the file.

Each case serves a copy of the built site (its files linked, not copied, but for the one
damaged) on a port of its own, so nothing a browser kept of another origin answers."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.browser import attach, wait_states

pytestmark = pytest.mark.browser

PYO = "vendor/pyodide"
CHAPTER, FIGURE = "ch10-quantization.html", "ch10-quant"
ERROR_JS = """(id) => {
  const el = document.querySelector(`[data-figure="${id}"]`);
  return {state: el.dataset.state, message: el.querySelector(".fig-error")?.textContent || ""};
}"""


def damaged_copy(site_dir: Path, tmp_path: Path, name: str, how: str) -> Path:
    """The site with `PYO/name` deleted, truncated to 100 bytes, or replaced by another file
    of the runtime (its compressed copies gone too, so the server sends what is damaged)."""
    copy = tmp_path / "site"
    shutil.copytree(site_dir, copy, copy_function=os.symlink)
    target = copy / PYO / name
    for p in (target, target.with_name(name + ".gz"), target.with_name(name + ".br")):
        p.unlink(missing_ok=True)
    original = (site_dir / PYO / name).read_bytes()
    if how == "truncated":
        target.write_bytes(original[:100])
    elif how == "other-file":
        target.write_bytes((site_dir / PYO / "pyodide.mjs").read_bytes())
    elif how == "flipped":                 # same size, the first section's id byte changed
        target.write_bytes(original[:8] + bytes([original[8] ^ 0xFF]) + original[9:])
    return copy


CASES = [
    # (file, damage, boot): the snapshot's boot needs no standard library zip, the normal one does
    ("pyodide.asm.wasm", "missing", ""),
    ("pyodide.asm.wasm", "truncated", ""),
    ("pyodide.asm.wasm", "other-file", ""),
    ("pyodide-lock.json", "truncated", ""),
    ("pyodide-lock.json", "missing", "?boot=normal"),
    ("pyodide.asm.wasm", "flipped", ""),
    ("python_stdlib.zip", "missing", "?boot=normal"),
    ("python_stdlib.zip", "truncated", "?boot=normal"),
]
WORDS = {"missing": r"is missing from the site \(HTTP 404\)", "truncated": r"has 100 bytes, the build wrote [\d,]+",
         "other-file": r"has [\d,]+ bytes, the build wrote [\d,]+ \(truncated or replaced\)",
         "flipped": r"is not the file the build wrote \(its sha256 differs\)"}


@pytest.mark.parametrize("name, how, boot", CASES, ids=[f"{n}-{h}{b and '-normal'}" for n, h, b in CASES])
def test_a_damaged_runtime_file_shows_the_error_naming_it(chromium, site_dir, tmp_path, name, how, boot):
    from builder.serve import serving

    copy = damaged_copy(site_dir, tmp_path, name, how)
    with serving(copy) as base:
        page = chromium.new_page()
        log = attach(page, base)
        try:
            t0 = time.monotonic()
            page.goto(base + CHAPTER + boot)
            states = wait_states(page, [FIGURE], timeout_s=15)
            took = time.monotonic() - t0
            shown = page.evaluate(ERROR_JS, FIGURE)
        finally:
            page.close()
    assert states == {FIGURE: "error"} and took < 15, (states, took)
    assert re.search(re.escape(f"{PYO}/{name} ") + WORDS[how], shown["message"]), shown["message"]
    assert shown["message"].startswith("Python could not start:"), shown["message"]
    assert [t for kind, t in log.console if kind == "pageerror"] == []
    assert log.off_site() == []


def test_the_page_carries_each_runtime_file_as_the_build_wrote_it(site_dir):
    """What the worker compares against is the site's own bytes (sizes and sha256)."""
    import hashlib

    m = re.search(r"runtime: (\{.*?\}) \};", (site_dir / CHAPTER).read_text())
    files = json.loads(m.group(1))["files"]
    assert {Path(p).name for p in files} >= {"pyodide.asm.wasm", "pyodide.asm.js", "pyodide-lock.json",
                                             "python_stdlib.zip"}
    for path, (size, digest) in files.items():
        data = (site_dir / path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest), path
