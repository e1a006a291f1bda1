// node builder/snapshot.mjs PYODIDE_DIR OUT_DIR PACKAGE PANEL_CDN_ROOT
//
// Makes the guide's Pyodide memory snapshot (run by builder/snapshot.py during the build):
// boots the vendored Pyodide from PYODIDE_DIR (the build's vendor/pyodide/, with its
// merged lock and wheels), installs PACKAGE (the guide's wheel, which depends on all the
// figures import), imports numpy, Bokeh, Panel, sim, widgets, widgets.runtime and every
// figure module, builds every figure (widgets.runtime.prebuild), then writes to OUT_DIR:
//   snapshot.bin  the wasm memory, as Pyodide's makeMemorySnapshot writes it
//   files.bin     the installed files the restored runtime needs on its file system
//                 (static/snapshot.js packFiles), without the compiled modules that are
//                 already imported (their code lives in the snapshot)
//   meta.json     shared libraries to replay, Python's dlopen handles, the function
//                 table's size, the packages Pyodide counts as loaded, the build id
//
// Every run with the same inputs writes the same bytes: the clock, the random source,
// the time zone and Python's hash seed are fixed while the snapshot is made.
//
// The time zone first, before anything reads a date: Emscripten's tzset allocates the
// zone's names on the heap, so another TZ (the builder's own) moves every allocation
// after it, numpy's shared libraries included. Node rereads TZ when it is assigned.
process.env.TZ = "UTC";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

// An error's own message and stack, written at once: Node's report of an uncaught error
// echoes the line of minified source it came from (hundreds of kB), and through a pipe it
// can exit before the Python traceback after that line is written.
const fail = (e) => { fs.writeSync(2, `snapshot failed: ${(e && e.stack) || e}\n`); process.exit(1); };
process.on("uncaughtException", fail);
process.on("unhandledRejection", fail);

const [pyodideDir, outDir, pkg, panelCdnRoot] = process.argv.slice(2);
if (!pkg) {
  console.error("usage: node builder/snapshot.mjs PYODIDE_DIR OUT_DIR PACKAGE PANEL_CDN_ROOT");
  process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const { serializer, packFiles, readDso } = await import(pathToFileURL(path.join(here, "../site/static/snapshot.js")));

// A fixed clock (1 ms per reading from a fixed date) and a fixed random source.
const realNow = performance.now.bind(performance);
let tick = 0;
const EPOCH = Date.UTC(2025, 0, 1);
Date.now = () => EPOCH + (tick += 1);
performance.now = () => (tick += 1);
let seed = 0x2545f491;
const next = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return seed >>> 0; };
Math.random = () => next() / 2 ** 32;
Object.defineProperty(globalThis, "crypto", {
  configurable: true,
  value: { getRandomValues(view) { const b = new Uint8Array(view.buffer, view.byteOffset, view.byteLength); for (let i = 0; i < b.length; i++) b[i] = next() & 255; return view; } },
});
// Panel does `from js import XMLHttpRequest` at import. Pyodide records that reference by
// its path (globalThis.XMLHttpRequest), so the worker's restored runtime gets its own.
globalThis.XMLHttpRequest = function XMLHttpRequest() {};

const t0 = realNow();
const say = (what) => console.log(`snapshot: ${((realNow() - t0) / 1000).toFixed(1)} s ${what}`);
const { loadPyodide, version } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")));
const py = await loadPyodide({ indexURL: pyodideDir + "/", fullStdLib: false, _makeSnapshot: true,
                               env: { PYTHONHASHSEED: "0" }, stdout: () => {}, stderr: (s) => console.error(s) });
const M = py._module;
const tableAtBoot = M.wasmTable.length;

// Each shared library gets a handle of our own, so where it lands can be read afterwards.
const dsos = [];
const load = M.loadDynamicLibrary;
M.loadDynamicLibrary = function (name, flags, localScope, handle) {
  if (!handle && !M.LDSO.loadedLibsByName[name]) {
    handle = M._calloc(64, 1);
    dsos.push({ name, handle, global: !!flags.global });
  }
  return load.call(this, name, flags, localScope, handle);
};
// One package at a time, dependencies first, in a fixed order: loadPackage installs a
// list in parallel, and the order things land in memory must not depend on timing.
const lock = JSON.parse(fs.readFileSync(path.join(pyodideDir, "pyodide-lock.json"), "utf8")).packages;
const order = [];
(function visit(name, trail) {
  if (order.includes(name)) return;
  if (!lock[name]) throw new Error(`${name} (needed by ${trail.join(" <- ")}) is not in the lock`);
  for (const dep of [...lock[name].depends].sort()) visit(dep, [name, ...trail]);
  order.push(name);
})(pkg, []);
const errors = [];
for (const name of order) {
  await py.loadPackage([name], { messageCallback: () => {}, errorCallback: (m) => errors.push(m) });
  if (errors.length) throw new Error(`installing ${name}: ${errors.join("; ")}`);
}
M.loadDynamicLibrary = load;
for (const d of dsos) Object.assign(d, readDso(M, d.handle));
say(`installed ${pkg} (${dsos.length} shared libraries)`);

py.globals.set("PANEL_CDN_ROOT", panelCdnRoot);
const imported = py.runPython(`
import os, sys, json, gc
import pyodide.ffi
if not hasattr(pyodide.ffi, "jsnull"):   # as static/worker.js does before importing Panel
    pyodide.ffi.jsnull = type("JsNullSentinel", (), {})()
os.environ["PANEL_CDN_ROOT"] = PANEL_CDN_ROOT
import numpy, bokeh, param, panel
import panel.io.pyodide
import sim, widgets
import widgets.runtime
from widgets.runtime import PageSession
for _fid in widgets.FIGURES:
    widgets.module(_fid)
del _fid
# every figure built, for the page to take instead of building it (widgets.runtime.prebuild)
widgets.runtime.prebuild(widgets.FIGURES)
gc.collect()
# Python's cyclic garbage collector leaves everything made so far alone from now on: a full
# collection in the page would otherwise walk all of it (about 300,000 objects; 138 ms in
# CPython on the build machine, several times that in the browser), a pause in a redraw
gc.freeze()
# compiled modules now in memory: their files need not be shipped with the snapshot (a
# module imported from its source keeps the source, for tracebacks, not its __pycache__)
def _compiled(m):
    spec = getattr(m, "__spec__", None)
    if spec is None:
        return None
    if isinstance(spec.origin, str) and spec.origin.endswith(".pyc"):
        return spec.origin
    return spec.cached if isinstance(spec.cached, str) and spec.cached.endswith(".pyc") else None
json.dumps(sorted({c for c in map(_compiled, list(sys.modules.values())) if c}))
`);
py.globals.delete("PANEL_CDN_ROOT");
const inMemory = new Set(JSON.parse(imported));
say(`imported (${inMemory.size} compiled modules in memory)`);

const site = "/lib/python3.12/site-packages";
// Files no import or figure reads in the browser: type stubs, pip's list of installed
// files, and the Jupyter extension that pyviz_comms ships for JupyterLab.
const NEVER_READ = /(\.pyi$|\.dist-info\/RECORD$|\/labextension\/|\.data\/data\/share\/jupyter\/)/;
const files = [];
let skipped = 0, unread = 0;
(function walk(dir) {
  for (const n of M.FS.readdir(dir).filter((n) => n !== "." && n !== "..").sort()) {
    const p = `${dir}/${n}`;
    if (M.FS.isDir(M.FS.stat(p).mode)) walk(p);
    else if (inMemory.has(p)) skipped += 1;
    else if (NEVER_READ.test(p)) unread += 1;
    else files.push([p, M.FS.readFile(p)]);
  }
})(site);

// Python's dlopen handles (C-side pointers) -> library name
const handles = Object.entries(M.LDSO.loadedLibsByHandle).filter(([h]) => +h !== 0)
  .map(([h, d]) => [+h, d.name]).sort((a, b) => a[0] - b[0]);
// Pyodide keeps loadedPackages in its table of JS references; it must be empty (as at
// boot) when the snapshot is made, and the worker fills it again after restoring.
const loaded = { ...py.loadedPackages };
for (const k of Object.keys(py.loadedPackages)) delete py.loadedPackages[k];
const snap = py.makeMemorySnapshot({ serializer });
Object.assign(py.loadedPackages, loaded);

const buildId = Array.from(new Uint32Array(snap.buffer, snap.byteOffset + 16, 8), (w) => w.toString(16).padStart(8, "0")).join("");
// the standard library's compiled modules in memory, by their name in the stdlib zip
const stdlibZip = `/lib/python${py.runPython("import sys; f'{sys.version_info[0]}{sys.version_info[1]}'")}.zip`;
const stdlibInMemory = [...inMemory].filter((p) => p.startsWith(stdlibZip + "/")).map((p) => p.slice(stdlibZip.length + 1)).sort();
const meta = { pyodide: version, build_id: buildId, size: snap.length, loaded, dsos, handles, tableAtBoot,
               stdlib_zip: stdlibZip, stdlib_in_memory: stdlibInMemory,
               tableAtSnap: M.wasmTable.length, files: files.length, files_in_memory: skipped, files_never_read: unread };
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "snapshot.bin"), snap);
fs.writeFileSync(path.join(outDir, "files.bin"), packFiles(files));
fs.writeFileSync(path.join(outDir, "meta.json"), JSON.stringify(meta, null, 1) + "\n");
say(`wrote ${(snap.length / 1e6).toFixed(1)} MB of memory, ${files.length} files (left out: ${skipped} compiled modules in memory, ${unread} files never read)`);
process.exit(0);
