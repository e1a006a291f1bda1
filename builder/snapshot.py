"""Step 2b, the Pyodide memory snapshot under vendor/snapshot/: Python with the guide's
wheels installed and numpy, Bokeh, Panel, sim, widgets and every figure module imported,
so a page's worker restores it instead of booting Python, installing and importing
(static/worker.js; the normal boot stays as its fallback).

builder/snapshot.mjs makes it in Node from the build's own vendor/pyodide/ (the core, the
wheels, the merged lock). The build ships three files, named by the sha256 of what they
hold (a changed wheel, sim/ or widgets/ makes another name):

  snapshot-<id>.bin.gz   the wasm memory (gzip; a static host serves it as it is and the
                         worker decompresses it), less the zero pages at its top
  files-<id>.bin.gz      the installed files the restored Python still reads: data files,
                         shared libraries and the modules not imported yet; the modules
                         already in memory are not shipped again. It also holds the
                         standard library's zip less the sources of the modules in memory
                         (1 MB less than Pyodide's own, which the restore never fetches)
  snapshot-<id>.json     the shared libraries to replay, the function table's size, ...

and, for hosts that serve precompressed copies, snapshot-<id>.bin.br and files-<id>.bin.br:
brotli copies (a third and a quarter smaller than the gzip ones) of <name>.bin, a file not
shipped itself. The worker asks for <name>.bin first; a host that negotiates
(Accept-Encoding) sends the .br or the .gz copy with Content-Encoding and the browser
decodes it; a host that does not answers 404 and the worker fetches <name>.bin.gz and
gunzips it.

The page's runtime config (builder/pages.py worker_config) names them with the runtime
build they belong to (Pyodide version, build id, sha256 of pyodide.asm.wasm), so the worker
rejects a snapshot of another runtime. Making it is reproducible: builder/snapshot.mjs
fixes the clock, the random source and the hash seed, installs one package at a time, and
gzip writes no time stamp. The result is cached in .cache/snapshot/ by the sha256 of every
input and re-verified on reuse.

If Node is missing or fails, the build fails and says why: a site without the snapshot
works (every page boots Python normally) but is several seconds slower per page, which
must not happen silently. `build.py --no-snapshot` builds such a site on purpose.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Callable

from builder import common
from builder.common import GUIDE_PACKAGE, PANEL_CDN_ROOT, PYO, ROOT, VENDOR, BuildError, locked, log, sha256_bytes

SNAPSHOT_DIR = f"{VENDOR}/snapshot"
SCRIPT = ROOT / "builder" / "snapshot.mjs"
CONTRACT = common.SITE_SRC / "static" / "snapshot.js"     # shared by snapshot.mjs and the worker
STEPS_VERSION = "5"        # bump when what snapshot.mjs or this module writes changes
GZIP_LEVEL = 6             # -9 is 6x slower for 1% less
# Brotli at its best: the copy a browser fetches on a first visit, and decodes as fast at
# any quality (77.5 MB of memory in 0.26 s in CPython at 9 and at 11). The memory at 11:
# 14.70 MB, against 17.18 MB at 9 and 15.39 MB at 10, in 162-169 s on one core of a 2-core
# machine (102 s at 10; at 9, 16 MB of it in 1.8 s); the installed files 3.67 MB, against
# 4.02 at 9, in 26 s. So a first visit sends 2.8 MB less for about 2.5 minutes more of a
# build that makes a new snapshot (only when a wheel, sim/ or widgets/ changed; the four
# copies are compressed at once, on as many cores as there are).
BROTLI = {"quality": 11, "lgwin": 24}
NODE_TIMEOUT_S = 600
FILES_MAGIC = b"GUIDEFS1"  # static/snapshot.js's file pack
SNAPSHOT_MAGIC = bytes([0x00, 0x73, 0x6E, 0x70])   # Pyodide's snapshot header (static/snapshot.js)
WASM_PAGE = 65536


def node() -> str:
    return os.environ.get("GUIDE_NODE", "node")


def node_version() -> str:
    try:
        return subprocess.run([node(), "--version"], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"cannot make the Pyodide memory snapshot: Node.js ({node()}) does not run: {e}. "
                         f"Install Node.js >= 18, or build with --no-snapshot (pages then boot Python "
                         f"normally, several seconds slower)") from None


def inputs_digest(pyo: Path, node_ver: str) -> str:
    """sha256 of everything the snapshot is made of: the runtime and every wheel (pyo),
    the scripts that make it, Node's version and the settings."""
    h = hashlib.sha256()
    for part in (STEPS_VERSION, node_ver, GUIDE_PACKAGE, PANEL_CDN_ROOT,
                 json.dumps({"gzip": GZIP_LEVEL, "brotli": BROTLI}, sort_keys=True)):
        h.update(part.encode() + b"\0")
    for p in [SCRIPT, CONTRACT] + sorted(q for q in pyo.iterdir() if q.is_file() and q.suffix != ".gz"):
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def content_id(memory: bytes, files: bytes, meta: bytes) -> str:
    """The name of a snapshot: the sha256 of its memory, installed files and metadata."""
    h = hashlib.sha256()
    for part in (memory, files, meta):
        h.update(len(part).to_bytes(8, "little") + hashlib.sha256(part).digest())
    return h.hexdigest()[:20]


def unpack_files(data: bytes) -> list[tuple[str, bytes]]:
    """static/snapshot.js unpackFiles, in Python."""
    if data[:8] != FILES_MAGIC:
        raise BuildError("builder/snapshot.mjs wrote no file pack")
    n = int.from_bytes(data[8:12], "little")
    out, off = [], 12 + n
    for path, size in json.loads(data[12:12 + n]):
        out.append((path, data[off:off + size]))
        off += size
    if off != len(data):
        raise BuildError(f"builder/snapshot.mjs's file pack has {len(data) - off} bytes unaccounted for")
    return out


def pack_files(entries: list[tuple[str, bytes]]) -> bytes:
    """static/snapshot.js packFiles, in Python."""
    index = json.dumps([[p, len(d)] for p, d in entries], separators=(",", ":")).encode()
    return FILES_MAGIC + len(index).to_bytes(4, "little") + index + b"".join(d for _, d in entries)


def stdlib_zip(original: bytes, in_memory: list[str]) -> bytes:
    """The standard library's zip without the sources of the modules already in the
    snapshot's memory (`in_memory`: their compiled names, __pycache__/x.cpython-312.pyc):
    the restored Python never reads them again. Deterministic: entries in the original's
    order, its time stamps and modes, deflate at a fixed level."""
    sources = {re.sub(r"(^|/)__pycache__/([^/]+)\.cpython-\d+\.pyc$", r"\1\2.py", p) for p in in_memory}
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as src, zipfile.ZipFile(out, "w") as dst:
        names = set(src.namelist())
        missing = sorted(sources - names)
        if missing:
            raise BuildError(f"the snapshot's modules {missing[:5]} are not in the runtime's standard library zip")
        for info in src.infolist():
            if info.filename in sources:
                continue
            kept = zipfile.ZipInfo(info.filename, info.date_time)
            kept.external_attr, kept.compress_type = info.external_attr, info.compress_type
            dst.writestr(kept, src.read(info), compresslevel=GZIP_LEVEL)
    return out.getvalue()


def trim_memory(snapshot: bytes) -> bytes:
    """Pyodide's snapshot less the zero pages at the top of its memory (13 MB of 90: the
    heap's free end), which the page then neither stores nor copies; the worker makes the
    wasm memory the snapshot's full size (its metadata's "size"), and fresh memory is zero.
    Pyodide's header (magic, then where the memory begins) is kept as it is."""
    if snapshot[:4] != SNAPSHOT_MAGIC:
        raise BuildError("builder/snapshot.mjs wrote no Pyodide snapshot (its first bytes are not the magic)")
    start = int.from_bytes(snapshot[4:8], "little")
    used = max(len(snapshot.rstrip(b"\0")) - start, 0)
    return snapshot[:start + -(-used // WASM_PAGE) * WASM_PAGE]


def finish(raw: Path, pyo: Path) -> tuple[bytes, bytes, bytes]:
    """What builder/snapshot.mjs wrote to `raw`, as shipped: (memory, installed files,
    metadata). The memory loses the zero pages at its top (`trim_memory`). The installed
    files gain the standard library's zip less the modules in memory (the worker writes it
    over the one Pyodide installs at boot, and is given an empty one to install, so the full
    zip is not downloaded)."""
    memory = (raw / "snapshot.bin").read_bytes()
    meta = (raw / "meta.json").read_bytes()
    m = json.loads(meta)
    if m["size"] != len(memory):
        raise BuildError(f"builder/snapshot.mjs's metadata gives the snapshot {m['size']} bytes, its file has {len(memory)}")
    memory = trim_memory(memory)
    files = unpack_files((raw / "files.bin").read_bytes())
    zipped = stdlib_zip((pyo / "python_stdlib.zip").read_bytes(), m["stdlib_in_memory"])
    return memory, pack_files(files + [(m["stdlib_zip"], zipped)]), meta


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip: no file name, no time stamp."""
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def brotli_bytes(data: bytes) -> bytes:
    """Brotli at fixed parameters (deterministic)."""
    import brotli

    return brotli.compress(data, **BROTLI)


def compressing(folder: Path, parts: dict[str, bytes]) -> Callable[[], None]:
    """Start writing <name>.gz and <name>.br in `folder` for each of `parts`, each on a
    thread of its own (zlib and brotli let go of the GIL while they work), the longest job
    (the memory's brotli copy) first; returns a function that waits for them all (and
    raises the first error). The threads are daemons: a build stopped by a signal exits at
    once instead of waiting out a brotli run."""
    jobs = [(f"{name}.{ext}", fn, data) for name, data in sorted(parts.items(), key=lambda kv: -len(kv[1]))
            for ext, fn in (("br", brotli_bytes), ("gz", gzip_bytes))]
    errors: list[BaseException] = []

    def run(out: str, fn: Callable[[bytes], bytes], data: bytes) -> None:
        try:
            (folder / out).write_bytes(fn(data))
        except BaseException as e:                      # (raised again by wait)
            errors.append(e)

    threads = [threading.Thread(target=run, args=job, name=f"compress {job[0]}", daemon=True) for job in jobs]
    for t in threads:
        t.start()

    def wait() -> None:
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    return wait


def compress_all(folder: Path, parts: dict[str, bytes]) -> None:
    """<name>.gz and <name>.br in `folder` for each of `parts` (`compressing`, waited for)."""
    compressing(folder, parts)()


def pinned_env() -> dict:
    """The builder's environment with the time zone and locale fixed: both can change what
    Node's runtime allocates, and so where everything lands in the snapshot's memory."""
    return {**os.environ, "TZ": "UTC", "LC_ALL": "C", "LANG": "C"}


def run_node(pyo: Path, work: Path) -> None:
    cmd = [node(), str(SCRIPT), str(pyo.resolve()), str(work), GUIDE_PACKAGE, PANEL_CDN_ROOT]
    log("+ " + " ".join(cmd))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, env=pinned_env())
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"cannot make the Pyodide memory snapshot: {e}. Build with --no-snapshot to ship "
                         f"pages that boot Python normally (several seconds slower)") from None
    for line in r.stdout.splitlines():
        log(line)
    if r.returncode != 0:
        # its last lines, each cut short (Node echoes a line of minified source before a stack)
        tail = "\n".join(line if len(line) <= 200 else line[:200] + "..."
                         for line in (r.stderr or r.stdout).strip().splitlines()[-15:])
        raise BuildError(f"builder/snapshot.mjs failed (exit {r.returncode}); the Pyodide memory snapshot "
                         f"could not be made:\n{tail}\nFix it, or build with --no-snapshot to ship pages "
                         f"that boot Python normally (several seconds slower)")


CACHED = ("memory.gz", "memory.br", "files.gz", "files.br", "meta.json")


def make_cached(pyo: Path) -> tuple[Path, dict, Callable[..., None]]:
    """The cache folder for this input's snapshot; its digest ("id", "memory_size",
    "files_size", known once Node has run) with its metadata in one dict; and a function that returns when
    the folder is complete: memory and files (.gz, .br), meta.json, digest.json. A folder
    already there (and verified) is complete at once; otherwise Node runs now and the
    compressed copies are written on other threads, while the build goes on, until the
    function is called. It must be called (it also releases the cache's lock), or, if the
    build stops first, `complete(abort=True)` drops the unfinished folder."""
    node_ver = node_version()
    key = inputs_digest(pyo, node_ver)
    root = common.CACHE / "snapshot"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key[:32]
    lock = contextlib.ExitStack()
    lock.enter_context(locked(root, "the snapshot cache"))
    work = None
    try:
        if folder.is_dir():
            problem = cache_problem(folder)
            if not problem:
                log(f"snapshot cache {folder.name} (inputs unchanged)")
                lock.close()
                made = {**json.loads((folder / "digest.json").read_text()), **json.loads((folder / "meta.json").read_text())}
                return folder, made, lambda abort=False: None
            log(f"snapshot cache {folder.name}: {problem}; making it again")
            shutil.rmtree(folder, ignore_errors=True)
        for stale in root.glob(".making-*"):
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".making-", dir=root))
        run_node(pyo, work / "raw")
        memory, files, meta = finish(work / "raw", pyo)
        digest = {"id": content_id(memory, files, meta), "memory_size": len(memory), "files_size": len(files)}
        wait = compressing(work, {"memory": memory, "files": files})
        (work / "meta.json").write_bytes(meta)
        shutil.rmtree(work / "raw")
    except BaseException:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        lock.close()
        raise

    def complete(abort: bool = False) -> None:
        try:
            if abort:
                raise InterruptedError
            wait()
            for name in CACHED:
                digest[name] = sha256_bytes((work / name).read_bytes())
            (work / "digest.json").write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")
            os.replace(work, folder)
        except BaseException as e:
            shutil.rmtree(work, ignore_errors=True)     # (a compressing thread may still write: the
            if not isinstance(e, InterruptedError):    #  next build clears a stray .making-*)
                raise
        finally:
            lock.close()
    return folder, {**digest, **json.loads(meta)}, complete


def cache_problem(folder: Path) -> str | None:
    try:
        digest = json.loads((folder / "digest.json").read_text())
        for name in CACHED:
            if sha256_bytes((folder / name).read_bytes()) != digest[name]:
                return f"{name} changed since it was made"
    except (OSError, ValueError, KeyError) as e:
        return f"unreadable ({e})"
    return None


def start_snapshot(out: Path, wasm_sha256: str) -> tuple[dict, Callable[..., None]]:
    """Step 2b, begun: what the pages' runtime config says of the snapshot (builder/pages.py
    worker_config), known once Node has run, and a function that ends the step: it waits
    for the compressed copies (made meanwhile on other threads) and puts the files into
    out/vendor/snapshot/. Call it before the output step; `end(abort=True)` if the build
    stops before."""
    folder, made, complete = make_cached(out / PYO)
    sid = made["id"]
    names = {"memory": f"snapshot-{sid}.bin.gz", "files": f"files-{sid}.bin.gz", "meta": f"snapshot-{sid}.json"}

    def end(abort: bool = False) -> None:
        complete(abort)
        if abort:
            return
        dst = out / SNAPSHOT_DIR
        dst.mkdir(parents=True)
        for key in ("memory", "files"):
            shutil.copyfile(folder / f"{key}.gz", dst / names[key])
            # the brotli copy of <name>.bin, which has no file of its own (see the module's doc)
            shutil.copyfile(folder / f"{key}.br", dst / names[key].replace(".bin.gz", ".bin.br"))
        shutil.copyfile(folder / "meta.json", dst / names["meta"])
        for n in sorted(p.name for p in dst.iterdir()):
            log(f"snapshot {sid}", f"{SNAPSHOT_DIR}/{n}")

    config = {"id": sid, **{k: f"{SNAPSHOT_DIR}/{n}" for k, n in names.items()},
              "memory_size": made["memory_size"], "files_size": made["files_size"],
              "pyodide": made["pyodide"], "build_id": made["build_id"], "wasm_sha256": wasm_sha256}
    return config, end


def make_snapshot(out: Path, wasm_sha256: str) -> dict:
    """Step 2b at once: the snapshot files into out/vendor/snapshot/; returns what the
    pages' runtime config says of them (`start_snapshot`, ended)."""
    config, end = start_snapshot(out, wasm_sha256)
    end()
    return config
