"""Where an export lands, and what it may delete there.

An export writes into a staging folder beside its target and moves the finished files in
at the end, with SIGINT, SIGTERM and SIGHUP held back while it moves them: a stop at any
other moment leaves the earlier export (or no folder) as it was. It recognises an earlier
export by the manifest only the exporter writes (MANIFEST: its schema and every file it
wrote, with size and sha256) and replaces or deletes only the files that manifest lists;
any other file in the folder stays. A folder that is not empty and has no manifest, or
whose files would be overwritten without being listed, is refused, naming the folder and
the file, before anything is written.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from pathlib import Path

from builder.common import sha256_file
from builder.output import fault_point, pid_alive
from sim.cli import UsageError, signals_held

MANIFEST = "export-manifest.json"
SCHEMA = "llm-inference-guide/figure-export"
VERSION = 1
STAGING_MARK = ".figure-export-staging"      # in a staging folder, so only ours are ever removed
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def plain(name: str) -> bool:
    """A file name with no folder part (a manifest must not reach outside its folder)."""
    return isinstance(name, str) and bool(PLAIN_NAME.fullmatch(name)) and name not in (".", "..")


def read_manifest(out: Path) -> dict[str, dict] | None:
    """The files an earlier export in `out` wrote (name -> {bytes, sha256}), or None when
    `out` holds no manifest. A manifest that is damaged or of another schema is an error."""
    path = out / MANIFEST
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        ok = (isinstance(doc, dict) and doc.get("schema") == SCHEMA and doc.get("version") == VERSION
              and isinstance(doc.get("files"), dict) and all(plain(n) for n in doc["files"]))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path} cannot be read ({e}); nothing in {out} was changed") from None
    if not ok:
        raise UsageError(f"{path} is not a manifest of this exporter (schema {SCHEMA} version {VERSION}, "
                         f"plain file names); nothing in {out} was changed")
    return doc["files"]


def check_target(out: Path, planned: set[str]) -> dict[str, dict]:
    """The earlier export's files in `out` ({} for a new or empty folder); UsageError, with
    nothing touched, when `out` cannot be an export folder or holds files not the exporter's
    that the export would overwrite."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder; choose a folder for the export")
    base = out
    while not base.exists():
        if base.parent == base:
            break
        base = base.parent
    if not base.is_dir():
        raise UsageError(f"{out}: {base} is a file, so no folder can be made under it")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(f"{out}: cannot write in {base} (permission denied or read-only)")
    if base != out:
        return {}
    names = {p.name for p in out.iterdir()}
    previous = read_manifest(out)
    if previous is None:
        if names:
            raise UsageError(f"{out} is not empty and holds no export of this guide ({MANIFEST} is missing); "
                             f"nothing in it was changed: choose a new or empty folder")
        return {}
    foreign = sorted((names & planned) - set(previous))
    if foreign:
        raise UsageError(f"{out}/{foreign[0]} was not written by the exporter (not in {MANIFEST}) and the "
                         f"export would replace it; nothing in {out} was changed")
    return previous


def staging_folder(out: Path) -> Path:
    """A new, marked staging folder beside `out` (its parents made); staging folders that
    dead exports left there are removed first."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for old in out.parent.glob(f".{out.name}.export-*"):
            m = re.fullmatch(rf"\.{re.escape(out.name)}\.export-(\d+)-[0-9a-f]+", old.name)
            if m and (old / STAGING_MARK).is_file() and not pid_alive(int(m.group(1))):
                shutil.rmtree(old, ignore_errors=True)
        staging = out.with_name(f".{out.name}.export-{os.getpid()}-{secrets.token_hex(4)}")
        staging.mkdir()
        (staging / STAGING_MARK).write_text("a figure export being written; removed when it ends\n")
    except OSError as e:
        raise UsageError(f"cannot make a folder beside {out}: {e.strerror or e}") from None
    return staging


def manifest_text(staging: Path) -> str:
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(staging.iterdir()) if p.name not in (MANIFEST, STAGING_MARK)}
    return json.dumps({"schema": SCHEMA, "version": VERSION, "exporter": "python build.py --export",
                       "files": files}, indent=1) + "\n"


def place(staging: Path, out: Path, planned: set[str], placed=lambda: None) -> list[str]:
    """Move the finished export in `staging` into `out`, replacing the earlier export's files
    and deleting those it listed that this export did not write; every other file of `out`
    stays. Signals are held back meanwhile; `placed()` is called once all is in place,
    before a signal that came meanwhile is raised. Returns the names written."""
    (staging / MANIFEST).write_text(manifest_text(staging))
    (staging / STAGING_MARK).unlink()
    written = sorted(p.name for p in staging.iterdir() if p.name != MANIFEST)
    previous = check_target(out, planned | set(written))          # the folder may have changed since
    with signals_held():
        if not out.exists():
            staging.rename(out)
        else:
            for name in written:
                os.replace(staging / name, out / name)
                fault_point("export-moving")
            for name in sorted(set(previous) - set(written)):
                (out / name).unlink(missing_ok=True)
            os.replace(staging / MANIFEST, out / MANIFEST)
        placed()
    shutil.rmtree(staging, ignore_errors=True)
    return written
