// The Python side of a page: Pyodide in a dedicated Web Worker, so the page stays
// responsive while Python loads. It builds the page's figures (one Bokeh document,
// one root per figure), sends the document to the page, then exchanges Bokeh JSON
// patches with it: reader changes in, recomputed figures out.
//
// Messages to the page: progress {stage, done, total}, render {docs_json, render_items,
// roots, errors}, patch {patch, buffers}, idle, error {figure, message} (a callback
// failed), fatal {message} (the runtime failed).
// Messages from the page: start {figures, runtime}, rendered, patch {patch}.
// `runtime` is where the build put things (the page carries it; builder/pages.py
// worker_config): pyodide (folder), module, lock, package (the guide's wheel),
// panel_cdn_root; its paths are relative to the site's root.

const ROOT = new URL("../", import.meta.url).href;            // the site's root folder
const post = (msg) => self.postMessage(msg);
const now = () => performance.timeOrigin + performance.now();  // comparable with the page's clock
const progress = (stage, done, total) => post({ type: "progress", stage, done, total, t: now() });

let pyodide = null;
let session = null;
const loadErrors = [];

function sendPatch(patch, buffers) {
  post({ type: "patch", patch, buffers });
}

async function start(figures, runtime) {
  progress("runtime", 0, 1);
  const pyodideModule = import(ROOT + runtime.module);
  // The guide's wheel depends on everything the figures import, so one call loads it all.
  // Its wheels are fetched (into the HTTP cache) while Pyodide boots, which is CPU-bound.
  const wheels = fetch(ROOT + runtime.lock).then((r) => r.json())
    .then((lock) => closure(lock.packages, [runtime.package]).map((n) => lock.packages[n].file_name));
  wheels.then((files) => {
    for (const file of files) fetch(ROOT + runtime.pyodide + file, { priority: "low" }).catch(() => {});
  }).catch(() => {});
  const { loadPyodide } = await pyodideModule;
  pyodide = await loadPyodide({ indexURL: ROOT + runtime.pyodide, lockFileURL: ROOT + runtime.lock, fullStdLib: false });
  const total = (await wheels).length;
  let loaded = 0;
  progress("packages", 0, total);
  await pyodide.loadPackage([runtime.package], {
    messageCallback: (m) => { if (m.startsWith("Loaded")) progress("packages", (loaded += 1), total); },
    errorCallback: (m) => loadErrors.push(m),
    checkIntegrity: true,
  });
  if (loadErrors.length) throw new Error("could not load the figures' Python packages: " + loadErrors.join("; "));
  progress("figures", 0, figures.length);
  pyodide.globals.set("PANEL_CDN_ROOT", runtime.panel_cdn_root);
  pyodide.globals.set("FIGURE_IDS", pyodide.toPy(figures));
  session = await pyodide.runPythonAsync(`
import os
import pyodide.ffi
if not hasattr(pyodide.ffi, "jsnull"):   # Panel 1.10 expects Pyodide >= 0.28; in 0.27 JS null is None already
    pyodide.ffi.jsnull = type("JsNullSentinel", (), {})()
os.environ["PANEL_CDN_ROOT"] = PANEL_CDN_ROOT   # Panel's stylesheets from the site, not a CDN
from widgets.runtime import PageSession
PageSession(list(FIGURE_IDS))
`);
  const [docs_json, render_items, roots, errors] = session.render().toJs({ dict_converter: Object.fromEntries });
  post({ type: "render", docs_json, render_items, roots, errors, t: now() });
}

// Packages `names` needs, by the lock's depends (what loadPackage will load).
function closure(packages, names) {
  const seen = new Set();
  const todo = [...names];
  while (todo.length) {
    const n = todo.pop();
    if (seen.has(n) || !packages[n]) continue;
    seen.add(n);
    todo.push(...packages[n].depends);
  }
  return [...seen];
}

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === "start") {
      await start(msg.figures, msg.runtime);
    } else if (msg.type === "rendered") {
      session.link(sendPatch);
    } else if (msg.type === "patch") {
      try {
        const failure = session.apply_patch(msg.patch);
        if (failure) post({ type: "error", ...JSON.parse(failure) });
      } finally {
        post({ type: "idle" });
      }
    }
  } catch (e) {
    post({ type: "fatal", message: String(e && e.message ? e.message : e) });
  }
};
