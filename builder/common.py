"""What every build step shares: paths, what the vendored runtime is (Runtime), the build's
error type, logging, hashing, downloads that land whole, atomic writes and the lock on a folder."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_SRC = ROOT / "site"
OUT = ROOT / "_site"
CACHE = Path(os.environ.get("GUIDE_CACHE", ROOT / ".cache"))   # downloads and processed wheels
VENDOR = "vendor"                                   # inside the output folder
PYO = f"{VENDOR}/pyodide"                           # Pyodide core, wheels and lock
PANEL_CDN_ROOT = f"{VENDOR}/panel/"                 # Panel's JS and CSS, as Panel names the folder
LOCK_FILE = "pyodide-lock.json"                     # in PYO: the merged lock Pyodide loads

GUIDE_DIST = "llm_inference_guide"
GUIDE_PACKAGE = "llm-inference-guide"


@dataclass
class Runtime:
    """What vendor_runtime produced: lock entries and versions the pages need."""

    lock_info: dict
    entries: dict[str, dict] = field(default_factory=dict)     # package name -> lock entry
    versions: dict[str, str] = field(default_factory=dict)     # bokeh, panel, pyodide
    snapshot: dict | None = None     # the memory snapshot, as the pages name it (builder.snapshot)


class BuildError(Exception):
    """A build step failed; the message says which input and what is wrong."""


def log(src: str, dst: str = "") -> None:
    print(f"{src} => {dst}" if dst else src, flush=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_hash(data: bytes, want: str, what: str) -> bytes:
    got = sha256_bytes(data)
    if got != want:
        raise BuildError(f"{what}: sha256 {got} does not match the pinned {want}; "
                         f"the file is corrupt or not the pinned release (delete it from {CACHE} to re-download)")
    return data


def run(*cmd, **kw) -> None:
    log("+ " + " ".join(map(str, cmd)))
    try:
        subprocess.run(list(map(str, cmd)), check=True, **kw)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"command failed: {' '.join(map(str, cmd))}: {e}") from None


def download(dest: Path, *cmd, **kw) -> None:
    """Run a download command `cmd` (its output folder given as "{dir}") into a private
    folder, then move what it wrote into `dest` by renames: a file in `dest` is always whole."""
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob(".download-*"):      # a killed build's (the cache lock is held)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=dest))
    try:
        run(*(str(tmp) if c == "{dir}" else c for c in cmd), **kw)
        for f in tmp.iterdir():
            os.replace(f, dest / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_atomic(dst: Path, write) -> None:
    """`write(tmp_path)` to a unique name next to `dst`, then rename it to `dst`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(folder: Path, what: str):
    """Hold an exclusive lock on `folder` (flock on the directory itself) while inside."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build to release {what}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
