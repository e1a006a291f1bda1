// The Python side of a page: Pyodide in a dedicated Web Worker, so the page stays
// responsive while Python loads. It builds the page's figures, one Bokeh document each,
// the figure the reader is looking at first (the page says which: "focus"); for each it
// tells the page the fingerprint of its models (widgets/runtime.py). The page adopts its
// build-time preview as the live figure when the fingerprints match ("adopted"), or asks
// for the document ("embed") and renders that ("rendered"). Then the two exchange Bokeh
// JSON patches per figure: reader changes in, recomputed figures out.
//
// Messages to the page: progress {stage, done, total}, built {figure, fingerprint} or
// {figure, error}, render {figure, doc} (the figure's document, JSON), patch {figure,
// patch, buffers}, idle, error {figure, message} (a callback failed), fatal {message}
// (the runtime failed).
// Messages from the page: start {figures, runtime}, focus {figures} (the order to build
// them in), adopted {figure}, embed {figure}, rendered {figure}, patch {figure, patch}.
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

let focus = [];   // figure ids in the order the page wants them built

function sendPatch(patch, buffers, figure) {
  post({ type: "patch", figure, patch, buffers });
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
  session = await pyodide.runPythonAsync(`
import os
import pyodide.ffi
if not hasattr(pyodide.ffi, "jsnull"):   # Panel 1.10 expects Pyodide >= 0.28; in 0.27 JS null is None already
    pyodide.ffi.jsnull = type("JsNullSentinel", (), {})()
os.environ["PANEL_CDN_ROOT"] = PANEL_CDN_ROOT   # Panel's stylesheets from the site, not a CDN
from widgets.runtime import PageSession
PageSession()
`);
  await buildFigures(figures);
}

async function buildFigures(figures) {
  // One figure at a time, the one the page asked for first; between two, the page's
  // messages (a figure adopted, a reader's change to a live figure) are handled.
  const todo = [...figures];
  for (let done = 0; todo.length; done += 1) {
    const next = focus.find((id) => todo.includes(id)) ?? todo[0];
    todo.splice(todo.indexOf(next), 1);
    post({ type: "built", ...JSON.parse(session.build(next)), t: now() });
    progress("figures", done + 1, figures.length);
    await new Promise((r) => setTimeout(r, 0));
  }
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
    } else if (msg.type === "focus") {
      focus = msg.figures;
    } else if (msg.type === "adopted" || msg.type === "rendered") {
      session.link(msg.figure, sendPatch);
    } else if (msg.type === "embed") {
      post({ type: "render", figure: msg.figure, doc: session.render(msg.figure), t: now() });
    } else if (msg.type === "patch") {
      try {
        const failure = session.apply_patch(msg.figure, msg.patch);
        if (failure) post({ type: "error", ...JSON.parse(failure) });
      } finally {
        post({ type: "idle" });
      }
    }
  } catch (e) {
    post({ type: "fatal", message: String(e && e.message ? e.message : e) });
  }
};
