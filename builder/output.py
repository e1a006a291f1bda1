"""Steps 5-6, the finished output: gzip copies, MANIFEST.json (and --verify against it),
then the atomic swap of the new site into place. The build works in a staging folder next
to the output; a signal leaves the previous site, and a build killed outright (even between
the two renames of a swap) is put right by `recover` at the next start."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import signal
import threading
import time
from pathlib import Path

from builder import common
from builder.common import log, sha256_bytes, sha256_file
from builder.runtime import PYODIDE_VERSION
from builder.wheels import wheel_problem
from sim.cli import Interrupted, signals_held, signals_interrupt  # noqa: F401 (the build's, as every command's)

# what precompress writes .gz and .br copies of (the server then sends the smallest copy
# the browser accepts; see builder/serve.py)
COMPRESSIBLE = {".html", ".js", ".mjs", ".css", ".json", ".wasm", ".svg", ".txt", ".map"}
GZIP_MIN_BYTES = 8192
# brotli at its best (quality 11) is slow (about 2.5 s per MB here), so its output is kept
# in the cache by the input's sha256: a vendored runtime file is compressed once. Files
# over BROTLI_LARGE_BYTES get quality 9 with a 16 MB window instead (none today: the
# memory snapshot is not among these files; builder/snapshot.py compresses it).
BROTLI_LARGE_BYTES = 16 << 20


def brotli_copy(data: bytes) -> bytes:
    """`data` compressed with brotli (deterministic: same input, same bytes), from the cache
    when a copy there decompresses to `data`."""
    import brotli

    large = len(data) > BROTLI_LARGE_BYTES
    params = {"quality": 9, "lgwin": 24} if large else {"quality": 11}
    cached = common.CACHE / "brotli" / f"{sha256_bytes(data)}-q{params['quality']}.br"
    with contextlib.suppress(OSError, brotli.error):
        packed = cached.read_bytes()
        if brotli.decompress(packed) == data:
            return packed
    packed = brotli.compress(data, **params)
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = sibling(cached, "tmp")
        tmp.write_bytes(packed)
        os.replace(tmp, cached)
    return packed


def compressible(p: Path) -> bool:
    """Whether precompress writes copies of file `p`."""
    return p.is_file() and p.suffix in COMPRESSIBLE and p.stat().st_size >= GZIP_MIN_BYTES


_warming: list[threading.Thread] = []


def warm_brotli(folder: Path) -> None:
    """Start making the brotli copies that precompress will want of the files now under
    `folder` (the vendored runtime, most of the bytes), into the cache, on a daemon thread
    while the build goes on; precompress waits for it rather than compress a file twice.
    Errors are left to precompress, which meets the same file again."""
    files = [p for p in sorted(folder.rglob("*")) if compressible(p)]

    def run() -> None:
        for p in files:
            with contextlib.suppress(Exception):
                brotli_copy(p.read_bytes())
    t = threading.Thread(target=run, name="brotli copies", daemon=True)
    t.start()
    _warming.append(t)


def precompress(out: Path) -> None:
    """gzip (.gz) and brotli (.br) copies of the large text and wasm files, for hosts that
    serve them as they are; a .br copy only where it is smaller than the .gz one."""
    import gzip
    while _warming:
        _warming.pop().join()
    n = n_br = 0
    for p in sorted(out.rglob("*")):
        if compressible(p):
            data = p.read_bytes()
            gz_path = p.with_name(p.name + ".gz")
            with open(gz_path, "wb") as f:
                with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as gz:
                    gz.write(data)
            n += 1
            br = brotli_copy(data)
            if len(br) < gz_path.stat().st_size:
                p.with_name(p.name + ".br").write_bytes(br)
                n_br += 1
    log(f"{n} files", "*.gz (gzip -9 copies)")
    log(f"{n_br} files", "*.br (brotli copies, where smaller than the .gz)")


def write_manifest(out: Path) -> None:
    """Step 5: MANIFEST.json lists every file of the site with its size and sha256."""
    files = {p.relative_to(out).as_posix(): [p.stat().st_size, sha256_file(p)]
             for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = {"pyodide": PYODIDE_VERSION, "files": files}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(v[0] for v in files.values())
    log(f"{len(files)} files, {total / 1e6:.1f} MB", "MANIFEST.json")


def verify_site(out: Path) -> list[str]:
    """Problems with a built site: files missing, changed or added since the build."""
    try:
        manifest = json.loads((out / "MANIFEST.json").read_text())["files"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{out}/MANIFEST.json unreadable: {exc}"]
    problems = []
    for name, (size, digest) in manifest.items():
        p = out / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif p.stat().st_size != size or sha256_file(p) != digest:
            problems.append(f"{name}: differs from the build (sha256 or size changed)")
        elif name.endswith(".whl") and wheel_problem(p.read_bytes()):
            problems.append(f"{name}: {wheel_problem(p.read_bytes())}")
    for p in out.rglob("*"):
        if p.is_file() and p.name != "MANIFEST.json" and p.relative_to(out).as_posix() not in manifest:
            problems.append(f"{p.relative_to(out).as_posix()}: not part of the build")
    return problems


# ("started": the staging folder exists; "staged": the new site is complete, before the swap;
# "between-renames": inside the two-rename swap, which the hook forces instead of the exchange).
FAULT = os.environ.get("GUIDE_BUILD_FAULT", "")


def fault_point(point: str) -> None:
    name, _, sig = FAULT.partition(":")
    if name == point:
        os.kill(os.getpid(), getattr(signal, sig))


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic call (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def sibling(out: Path, kind: str) -> Path:
    """A fresh name next to `out` for this process: <out>.<kind>-<pid>-<random>."""
    return out.with_name(f"{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def swap_into_place(staging: Path, out: Path) -> None:
    """Step 6: the new site replaces the old one atomically (an exchange of the two folders;
    where the file system cannot exchange, two renames that no signal can come between),
    then the old one is deleted."""
    if not (out.exists() or out.is_symlink()):
        staging.rename(out)
    elif FAULT.startswith("between-renames") or not exchange(staging, out):
        old = sibling(out, "old")
        with signals_held():
            out.rename(old)
            try:
                fault_point("between-renames")
                staging.rename(out)
            except OSError:
                old.rename(out)
                raise
        staging = old
    remove_quietly(staging)
    log("new site", str(out))


def remove_quietly(folder: Path) -> None:
    """Delete a leftover folder; if that fails, say so and go on (the next build retries)."""
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            log(f"warning: could not delete {folder}; the next build tries again")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner(p: Path) -> int | None:
    """The process id in a name made by `sibling`, or None."""
    m = re.fullmatch(r".*\.(?:tmp|old)-(\d+)-[0-9a-f]+", p.name)
    return int(m.group(1)) if m else None


def leftovers(out: Path, kind: str) -> list[Path]:
    """Staging (kind "tmp") or replaced (kind "old") folders of builds that are no longer
    running: those `sibling` named for a dead process, or others over an hour old; oldest first."""
    found = []
    for p in out.parent.glob(f"{out.name}.{kind}*"):
        pid = owner(p)
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            found.append(p)
        elif pid is None and p.is_dir() and time.time() - p.stat().st_mtime > 3600:
            found.append(p)
    return sorted(found, key=lambda p: p.stat().st_mtime)


def recover(out: Path) -> None:
    """Undo what an interrupted build left. A build killed between the two renames of its
    swap left no `out`: its finished staging folder (checked against its manifest) takes
    the place, or else the old site goes back. Then stale folders are deleted."""
    old, tmp = leftovers(out, "old"), leftovers(out, "tmp")
    if old and not (out.exists() or out.is_symlink()):
        done = [p for p in tmp if owner(p) == owner(old[-1]) and not verify_site(p)]
        (done or old)[-1].rename(out)
        log(f"{out}: {'finished the swap' if done else 'restored the previous site'} of a killed build")
    for p in old + tmp:
        if p.exists():
            log(f"removing {p.name} (left by an interrupted build)")
            remove_quietly(p)
