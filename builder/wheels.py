"""Wheels: deterministic archives, bytecode for the browser's CPython 3.12, the cache of
processed wheels (each checked against the sha256 it was written with), the guide's own
wheel, and the last check that every wheel about to ship unzips and matches the lock."""
from __future__ import annotations

import base64
import email.message
import email.parser
import hashlib
import io
import json
import sys
import tomllib
import zipfile
import zlib
from pathlib import Path

from builder import common
from builder.common import (GUIDE_DIST, GUIDE_PACKAGE, LOCK_FILE, PYO, ROOT, BuildError, Runtime, log, sha256_bytes,
                            write_atomic)

ZIP_DATE = (1980, 1, 1, 0, 0, 0)                    # fixed timestamps: reproducible archives
# the .dist-info/WHEEL of the wheels the build packs itself (the guide's, those from sdists)
PURE_WHEEL = b"Wheel-Version: 1.0\nGenerator: llm-inference-guide build.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


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



def read_wheel_bytes(data: bytes, what: str) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return {i.filename: z.read(i.filename) for i in z.infolist() if not i.is_dir()}
    except ZIP_ERRORS as exc:
        raise BuildError(f"{what}: not a readable wheel ({exc}); delete it to have the build fetch "
                         f"or rebuild it") from None



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
    folder = common.CACHE / "processed" / key
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


def check_shipped_wheels(out: Path) -> None:
    """Every wheel in the merged lock is there, has the lock's sha256 and unzips (CRCs)."""
    pyo = out / PYO
    lock = json.loads((pyo / LOCK_FILE).read_text())
    for name, entry in sorted(lock["packages"].items()):
        data = (pyo / entry["file_name"]).read_bytes()
        if sha256_bytes(data) != entry["sha256"]:
            raise BuildError(f"{PYO}/{entry['file_name']}: sha256 differs from the lock's; not shipping it")
        problem = wheel_problem(data)
        if problem:
            raise BuildError(f"{PYO}/{entry['file_name']} ({name}): {problem}; not shipping it "
                             f"(delete {common.CACHE / 'processed'} to rebuild the processed wheels)")
    log(f"{len(lock['packages'])} wheels", "unzip and match the lock")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project_version() -> str:
    return project()["project"]["version"]


def browser_packages() -> list[str]:
    """The packages the guide's wheel ships to the browser (pyproject.toml [tool.guide]);
    build-time code (builder/), the trace recorder and the tests stay out of it."""
    return list(project()["tool"]["guide"]["browser-packages"])


def build_guide_wheel(out: Path, runtime: Runtime) -> None:
    """Step 2: the browser packages (sim/, widgets/) as one wheel the page loads (sources
    kept for tracebacks), and the merged lock: the runtime's entries and this wheel's."""
    version = project_version()
    files: dict[str, bytes] = {}
    packages = browser_packages()
    for package in packages:
        for p in sorted((ROOT / package).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json"):
                files[p.relative_to(ROOT).as_posix()] = p.read_bytes()
    dist = f"{GUIDE_DIST}-{version}.dist-info"
    files[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: {GUIDE_PACKAGE}\nVersion: {version}\n"
                                 f"Requires-Dist: numpy\nRequires-Dist: panel\nRequires-Dist: bokeh\n").encode()
    files[f"{dist}/WHEEL"] = PURE_WHEEL
    files[f"{dist}/top_level.txt"] = "".join(f"{p}\n" for p in packages).encode()
    files[f"{dist}/RECORD"] = b""
    fname = f"{GUIDE_DIST}-{version}-py3-none-any.whl"
    write_wheel(out / PYO / fname, compile_sources(files, keep_source=True))
    data = (out / PYO / fname).read_bytes()
    runtime.entries[GUIDE_PACKAGE] = {
        "name": GUIDE_PACKAGE, "version": version, "file_name": fname, "install_dir": "site",
        "sha256": sha256_bytes(data), "package_type": "package", "imports": packages,
        "depends": ["bokeh", "numpy", "panel"], "unvendored_tests": False, "shared_library": False}
    log(" ".join(f"{p}/" for p in packages), f"{PYO}/{fname}")
    lock = {"info": runtime.lock_info, "packages": dict(sorted(runtime.entries.items()))}
    (out / PYO / LOCK_FILE).write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n")
    log("merged lock", f"{PYO}/{LOCK_FILE}")
