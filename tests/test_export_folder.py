"""builder.export_folder: an export replaces or deletes only the files its own manifest
lists, refuses folders it cannot use in one line, and moves its files in whole.

These run the folder logic on small stand-in exports (no Chromium); tests/test_export.py
and tests/test_cli_errors.py run real exports, interrupted too."""
from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from builder.export_folder import (MANIFEST, SCHEMA, STAGING_MARK, check_target, place, read_manifest,
                                   staging_folder)
from sim.cli import UsageError

PLANNED = {"index.html", "index.json", "a.png", "a.svg"}


def staged(out: Path, files: dict[str, str]) -> Path:
    """A staging folder beside `out` holding `files` (name -> text), as write_export leaves it."""
    staging = staging_folder(out)
    for name, text in files.items():
        (staging / name).write_text(text)
    return staging


def tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_new_folder_gets_the_files_and_a_manifest_listing_them(tmp_path):
    out = tmp_path / "new" / "exports"
    written = place(staged(out, {"index.json": "[]", "a.png": "png"}), out, PLANNED)
    assert written == ["a.png", "index.json"]
    doc = json.loads((out / MANIFEST).read_text())
    assert doc["schema"] == SCHEMA and sorted(doc["files"]) == written
    assert doc["files"]["a.png"] == {"bytes": 3, "sha256": hashlib.sha256(b"png").hexdigest()}
    assert set(os.listdir(tmp_path / "new")) == {"exports"}          # no staging folder left


def test_a_foreign_index_json_and_its_folder_are_kept(tmp_path):
    """The reported loss: a project folder with its own index.json and a src/ beside it."""
    (tmp_path / "index.json").write_text('{"mine": true}')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match=rf"{tmp_path} is not empty and holds no export"):
        check_target(tmp_path, PLANNED)
    assert {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_later_export_replaces_only_what_the_manifest_lists(tmp_path):
    out = tmp_path / "exports"
    place(staged(out, {"index.json": "[1]", "a.png": "old", "a.svg": "old svg"}), out, PLANNED)
    (out / "notes.md").write_text("the teacher's notes")            # added by the reader
    check_target(out, PLANNED)
    place(staged(out, {"index.json": "[2]", "a.png": "new"}), out, PLANNED)
    assert tree(out) == {"a.png": b"new", "export-manifest.json": (out / MANIFEST).read_bytes(),
                         "index.json": b"[2]", "notes.md": b"the teacher's notes"}
    assert sorted(read_manifest(out)) == ["a.png", "index.json"]    # a.svg, listed before, deleted


def test_a_file_the_export_would_overwrite_but_did_not_write_is_refused(tmp_path):
    out = tmp_path / "exports"
    place(staged(out, {"index.json": "[1]"}), out, PLANNED)
    (out / "a.png").write_text("the reader's own picture")
    with pytest.raises(UsageError, match=r"a.png was not written by the exporter"):
        check_target(out, PLANNED)
    staging = staged(out, {"index.json": "[2]", "a.png": "new"})
    with pytest.raises(UsageError, match=r"a.png was not written by the exporter"):
        place(staging, out, PLANNED)                                  # checked again at the move
    assert (out / "a.png").read_text() == "the reader's own picture" and (out / "index.json").read_text() == "[1]"


@pytest.mark.parametrize("manifest", [
    "{not json",
    json.dumps({"schema": "something-else", "version": 1, "files": {}}),
    json.dumps({"schema": SCHEMA, "version": 1, "files": {"../outside.txt": {}}}),
    json.dumps({"schema": SCHEMA, "version": 1, "files": {"/etc/passwd": {}}}),
])
def test_a_damaged_or_hostile_manifest_deletes_nothing(tmp_path, manifest):
    (tmp_path / "outside.txt").write_text("keep")
    out = tmp_path / "exports"
    out.mkdir()
    (out / MANIFEST).write_text(manifest)
    (out / "index.json").write_text("[]")
    with pytest.raises(UsageError, match="nothing in .* was changed"):
        check_target(out, PLANNED)
    assert (tmp_path / "outside.txt").read_text() == "keep" and (out / "index.json").read_text() == "[]"


def test_bad_paths_are_refused_in_one_line(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(UsageError, match=r"is a file, not a folder"):
        check_target(a_file, PLANNED)
    with pytest.raises(UsageError, match=r"file.txt is a file, so no folder can be made under it"):
        check_target(a_file / "sub" / "exports", PLANNED)


def test_a_read_only_place_is_refused():
    """/proc refuses new folders even to root (the tests run as root in CI)."""
    with pytest.raises(UsageError, match=r"cannot (write in|make a folder beside)"):
        check_target(Path("/proc/exports"), PLANNED)
        staging_folder(Path("/proc/exports"))


def test_a_stop_during_the_move_takes_effect_once_all_is_in_place(tmp_path, monkeypatch):
    """SIGINT while the files move: held back until the new export is whole. (Python's own
    SIGINT handler is set here: a process started in the background, as CI may be, inherits
    SIGINT ignored, and then a Ctrl-C rightly does nothing.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    out = tmp_path / "exports"
    place(staged(out, {"index.json": "[1]", "a.png": "old", "a.svg": "old"}), out, PLANNED)
    staging = staged(out, {"index.json": "[2]", "a.png": "new", "a.svg": "new"})
    moves = []
    real_replace = os.replace

    def replace(src, dst):
        real_replace(src, dst)
        moves.append(Path(dst).name)
        if len(moves) == 1:
            os.kill(os.getpid(), signal.SIGINT)          # arrives in the middle of the move
    monkeypatch.setattr(os, "replace", replace)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            place(staging, out, PLANNED, placed=lambda: done.append(True))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == [True] and moves[-1] == MANIFEST
    assert {n: (out / n).read_text() for n in ("index.json", "a.png", "a.svg")} == {
        "index.json": "[2]", "a.png": "new", "a.svg": "new"}


def test_staging_folders_of_dead_exports_are_removed_and_no_other(tmp_path):
    out = tmp_path / "exports"
    dead = tmp_path / f".exports.export-{2**22 + 12345}-abcd1234"     # no such process
    dead.mkdir()
    (dead / STAGING_MARK).write_text("")
    lookalike = tmp_path / f".exports.export-{2**22 + 12346}-abcd1234"  # not marked: not ours
    lookalike.mkdir()
    staging = staging_folder(out)
    assert not dead.exists() and lookalike.is_dir() and (staging / STAGING_MARK).is_file()
