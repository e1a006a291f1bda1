// The page side of the guide's live figures.
//
// Each figure container <figure data-figure="ID" data-state="..."> moves through
//   static  -> the SVG poster made at build time is painted with the HTML; then the
//              pre-rendered Bokeh document (also made at build time) replaces it,
//              with working controls but no Python behind them yet;
//   loading -> the page's Web Worker is loading Python (progress shown);
//   live    -> the figure is the Python document, recomputed on every change: the preview
//              itself when Python built the same models (it is adopted, nothing is
//              rendered twice), else a document Python sends;
//   error   -> Python failed for this figure: a readable message, the preview kept.
// A reader's changes to the preview's controls are carried into the live figure.
// The worker was started by the inline script in <head> (window.__guide), so Python
// loads while this file and BokehJS are still being parsed.
// A link's control values (state.js) are shown by the live figure, not by the preview.
// A live figure's data-live says how it went live: "adopted" (its preview linked to
// Python) or "embedded" (Python's document rendered in place of the preview).

import { applyLink, initSharing, linkPhrase, linkValue, noteChangeFromPython, readLink, statusBox, watchControls } from "./state.js";

const G = window.__guide;
const T = (G.timing = G.timing || {});
const mark = (key, t = performance.now()) => { T[key] = t; };
const STAGES = { runtime: "starting Python", packages: "loading packages", figures: "building figures" };
const FIGS = (G.figs = new Map());   // figure id -> {el, frame, status, preview, staticRoot, liveRoot, doc, live}

for (const el of document.querySelectorAll("[data-figure]")) {
  FIGS.set(el.dataset.figure, {
    id: el.dataset.figure,
    el,
    frame: el.querySelector(".fig-frame"),
    status: el.querySelector(".fig-status-text"),
    bar: el.querySelector(".fig-status progress"),
    preview: el.querySelector(".fig-preview"),
    poster: el.querySelector(".fig-poster"),
    now: el.querySelector(".fig-now"),
    staticRoot: null,
    live: false,
  });
}

function setState(fig, state, text) {
  fig.el.dataset.state = state;
  if (text === undefined) return;
  const pending = state === "live" || state === "error" ? "" : linkPhrase(fig);
  fig.status.textContent = pending ? `${text} ${pending}` : text;
}

// ------------------------------------------------------------------ the reader first

// What a page does for the reader's later pages (the offline copy and the scripts' second
// run: offline.js; keeping the memory snapshot: worker.js, which watches the changes it is
// sent) waits until AFTER_LIVE_MS after the last figure went live, when a reader who waited
// for the figures begins to move them, and until the reader has left the figures alone for
// QUIET_MS: their changes have the machine to their own recomputation. G.whenQuiet(fn)
// calls fn then; G.readerChange() marks a reader's change and tells the listeners added
// with G.onReaderChange (offline.js: the service worker pauses its copy meanwhile).
const QUIET_MS = 1000;
const AFTER_LIVE_MS = 3000;
let lastChange = -Infinity;
let lastLive = -Infinity;
const changeListeners = [];
G.onReaderChange = (fn) => { changeListeners.push(fn); };
G.readerChange = () => {
  lastChange = performance.now();
  for (const fn of changeListeners) fn();
};
G.whenQuiet = (fn) => {
  const check = () => {
    const left = Math.max(lastChange + QUIET_MS, lastLive + AFTER_LIVE_MS) - performance.now();
    if (left > 0) setTimeout(check, left); else fn();
  };
  check();
};
for (const type of ["pointerdown", "keydown"]) {     // a drag or a key press begins before its change
  document.addEventListener(type, (e) => { if (e.target.closest?.("[data-figure]")) G.readerChange(); },
                            { capture: true, passive: true });
}

readLink(FIGS);
initSharing(FIGS);
for (const fig of FIGS.values()) setState(fig, fig.el.dataset.state, fig.status.textContent);

function showError(fig, message) {
  setState(fig, "error", "This figure could not run its Python; the preview above is static.");
  statusBox(fig, "pre", "fig-error", "alert").textContent = message;
  if (fig.bar) fig.bar.hidden = true;
  console.error(`figure ${fig.el.dataset.figure}: ${message}`);
}

// ------------------------------------------------------------------ BokehJS

// BokehJS and Panel's JS (2.5 MB) are loaded after the first paint, so the posters are on
// screen before any of it is parsed; previews and the live figures wait for them.
// Online they come from the network (the service worker leaves them to the browser's HTTP
// cache, beside which Chrome keeps their compiled code: sw.js); when that fails (the network
// gone while the browser still says it is online), all of them again from the offline copy.
function loadScript(src) {
  return new Promise((resolve, reject) => {
    const el = document.createElement("script");
    el.src = src;
    el.async = false;                       // executed in the order they were added
    el.onload = resolve;
    el.onerror = () => { el.remove(); reject(new Error(`could not load ${src}`)); };
    document.head.append(el);
  });
}
const loadScripts = (suffix) => Promise.all(G.scripts.map((src) => loadScript(src + suffix)));
const afterPaint = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
const bokehReady = afterPaint()
  .then(() => loadScripts("").catch((e) => (navigator.serviceWorker?.controller ? loadScripts("?copy") : Promise.reject(e))))
  .then(() => mark("bokeh"));
bokehReady.catch((e) => onFatal(`the page's figure library did not load: ${e.message}`));

// ------------------------------------------------------------------ static preview

const nextPaint = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

async function embedPreview(id, fig) {
  await bokehReady;
  if (fig.live) return;
  const data = JSON.parse(fig.el.querySelector("script.fig-prerender").textContent);
  const target = document.createElement("div");
  // drawn out of the page's flow, over the poster and hidden, until it takes the poster's
  // place in one frame: the text below moves once, by the difference of their heights
  target.className = "fig-bokeh fig-building";
  target.id = `preview-${id}`;
  fig.preview.append(target);
  data.render_items[0].roots = { [data.root_id]: target.id };
  const views = await Bokeh.embed.embed_items(data.docs_json, data.render_items);
  fig.staticRoot = [...views[0].roots.values()][0].model;
  fig.staticViews = views;
  nameControls([...views[0].roots.values()][0]);
  describeFigure(fig, fig.staticRoot);
  fig.fingerprint = data.fingerprint;            // of its models, as Python's (widgets/runtime.py)
  fig.initial = controlValues(fig.staticRoot);   // to tell what the reader changes before it is live
  await nextPaint();
  target.classList.remove("fig-building");
  if (fig.poster) {
    // kept, out of sight, for printing: a printed chapter shows each figure's poster
    // (guide.css @media print) rather than its live controls
    fig.poster.classList.add("fig-print-only");
    fig.frame.after(fig.poster);
  }
  mark(`preview:${id}`);
}

// ------------------------------------------------------------------ carrying reader changes

const CONTROL_ATTRS = ["value", "active", "values", "value_throttled"];

function valueModel(m) {
  // A composite control (e.g. a discrete slider: a box around a slider) keeps its value
  // on an inner model.
  if (CONTROL_ATTRS.some((a) => a in m.properties)) return m;
  return [...m.references()].find((r) => CONTROL_ATTRS.some((a) => a in r.properties)) || m;
}

function controlsOf(root) {
  // The figure's controls (models with a "ctl-<key>" CSS class), by class.
  const out = new Map();
  if (!root) return out;
  for (const m of [root, ...root.references()]) {
    const cls = (m.css_classes || []).find((c) => c.startsWith("ctl-"));
    if (cls) out.set(cls, valueModel(m));
  }
  return out;
}

function readAttr(m, attr) {
  try { return m[attr]; } catch { return undefined; }   // an attribute never set
}

function controlValues(root) {
  // class -> {attribute: value as JSON} of each control of `root`
  const out = new Map();
  for (const [cls, m] of controlsOf(root)) {
    const values = {};
    for (const attr of CONTROL_ATTRS) if (attr in m.properties) values[attr] = JSON.stringify(readAttr(m, attr));
    out.set(cls, values);
  }
  return out;
}

function replayChanges(fig) {
  // An adopted preview: whatever the reader set on its controls before Python was there
  // is sent to Python now, as the change it is (set back to the built value silently,
  // then to the reader's, which the document reports). Returns the classes replayed.
  const replayed = new Set();
  for (const [cls, m] of controlsOf(fig.liveRoot)) {
    const initial = fig.initial.get(cls);
    if (!initial) continue;
    const changed = {};
    for (const [attr, text] of Object.entries(initial)) {
      const value = readAttr(m, attr);
      if (JSON.stringify(value) !== text && text !== undefined) changed[attr] = value;
    }
    const attrs = Object.keys(changed);
    if (!attrs.length) continue;
    replayed.add(cls);
    m.setv(Object.fromEntries(attrs.map((a) => [a, JSON.parse(initial[a])])), { silent: true });
    m.setv(changed);
  }
  return replayed;
}

function carryOver(fig, liveRoot) {
  // Whatever the reader set on the preview's controls, set again on the live ones;
  // returns the classes of the controls carried.
  const carried = new Set();
  const before = controlsOf(fig.staticRoot);
  const after = controlsOf(liveRoot);
  for (const [cls, old] of before) {
    const now = after.get(cls);
    if (!now) continue;
    for (const attr of CONTROL_ATTRS) {
      if (!(attr in old.properties) || attr === "value_throttled") continue;
      const a = JSON.stringify(old[attr]);
      if (a !== JSON.stringify(now[attr])) {
        carried.add(cls);
        now[attr] = old[attr];
        if (attr === "value" && "value_throttled" in now.properties) now.value_throttled = old[attr];
      }
    }
  }
  return carried;
}

// ------------------------------------------------------------------ live figures

// Python builds one figure at a time, the one in view first, and says so ("built", with
// the fingerprint of its models). When the fingerprint is the preview's, the preview is
// the live figure already: the page links it to Python ("adopted"). Otherwise (the
// preview did not render, or Python built other models) the page asks for Python's
// document ("embed") and renders it in place of the preview ("render").

const worker = G.worker;
const DOCS = new Map();   // live Bokeh document -> its figure
let patching = 0;
let busy = false;
let queue = [];

function sendChange(fig, event) {
  // Coalesce while Python is busy: keep only the newest change of each model attribute
  // (the same scheme as Panel's own worker handler).
  if ((event.setter_id != null && event.setter_id === "py") || patching > 0) {
    noteChangeFromPython(event);
    return;
  }
  G.readerChange();
  if (busy) {
    if (event.model && event.attr) queue = queue.filter((e) => !(e.model === event.model && e.attr === event.attr));
    queue.push(event);
    return;
  }
  busy = true;
  worker.postMessage({ type: "patch", figure: fig.id, patch: fig.doc.create_json_patch([event]) });
}

function linkDocument(fig, root) {
  fig.liveRoot = root;
  fig.doc = root.document;
  DOCS.set(fig.doc, fig);
  fig.doc.on_change((event) => sendChange(fig, event), false);
  watchControls(fig, root);
}

function preview(fig) {
  // The figure's preview, drawn now if it was not yet (a figure out of view).
  if (!fig.previewing) {
    fig.previewing = embedPreview(fig.id, fig).catch((e) => {
      console.warn(`preview of ${fig.id} not shown: ${e}`);   // the poster stays
    });
  }
  return fig.previewing;
}

async function onBuilt(msg) {
  const fig = FIGS.get(msg.figure);
  if (!fig) return;
  mark(`built:${msg.figure}`, msg.t - performance.timeOrigin);
  if (msg.error) {
    showError(fig, msg.error);
    return;
  }
  await bokehReady;
  await preview(fig);
  if (fig.staticRoot && !fig.live && fig.fingerprint && fig.fingerprint === msg.fingerprint) {
    linkDocument(fig, fig.staticRoot);
    worker.postMessage({ type: "adopted", figure: fig.id });   // Python forwards its changes from now on
    fig.carried = replayChanges(fig);
    // the preview's view moves out of its wrapper, where a live figure's view is
    const view = fig.preview.querySelector(".fig-bokeh");
    fig.frame.append(view);
    fig.preview.remove();
    fig.el.dataset.live = "adopted";
    becameLive(fig);
  } else {
    worker.postMessage({ type: "embed", figure: fig.id });
  }
}

async function onRender(msg) {
  // Python's document of one figure, rendered in place of its preview.
  const fig = FIGS.get(msg.figure);
  if (!fig || fig.live) return;
  mark(`rendered:${msg.figure}`, msg.t - performance.timeOrigin);
  const { docs_json, render_items, root_id } = JSON.parse(msg.doc);
  const target = document.createElement("div");
  target.className = "fig-bokeh fig-live";
  target.id = `live-${fig.id}`;
  fig.frame.append(target);
  const roots = { [root_id]: target.id };
  // BokehJS renders every root of the document; one without an element of its own would
  // be appended to the page, so any root that is not the figure gets a hidden element.
  const docRoots = Object.values(docs_json)[0].roots.map((r) => r.id);
  for (const rid of docRoots) {
    if (rid in roots) continue;
    const spare = document.createElement("div");
    spare.hidden = true;
    spare.id = `live-extra-${rid}`;
    document.body.append(spare);
    roots[rid] = spare.id;
  }
  render_items[0].roots = roots;
  render_items[0].root_ids = docRoots;
  const views = await Bokeh.embed.embed_items(docs_json, render_items);
  const root = [...views[0].roots.values()].map((v) => v.model).find((m) => m.id === root_id);
  linkDocument(fig, root);
  worker.postMessage({ type: "rendered", figure: fig.id });   // Python forwards its changes from now on
  fig.carried = carryOver(fig, root);   // sent to Python like any reader change
  await nextPaint();
  for (const v of fig.staticViews || []) v.remove?.();
  fig.preview.remove();
  target.classList.remove("fig-live");
  fig.el.dataset.live = "embedded";
  becameLive(fig);
}

// ------------------------------------------------------------------ accessible names

// Names the widgets' own markup lacks, for screen readers (tests/test_reading.py runs
// axe-core on every page): a slider's handle, a player's buttons and its range, a checkbox;
// each from the control's own title or label. Run when a figure is drawn and after Python
// changed it (a widget drawn anew has lost them).
const PLAYER_BUTTONS = { first: "first step", previous: "previous step", reverse: "play backwards",
                         pause: "pause", play: "play", next: "next step", last: "last step" };
function nameControls(rootView) {
  (function walk(v) {
    if (!v || !v.el || !v.model) return;
    const inside = v.el.shadowRoot;
    const title = String(v.model.title || v.model.label || v.model.name || "");
    if (inside) {
      const unnamed = (sel) => [...inside.querySelectorAll(sel)].filter((el) => !el.hasAttribute("aria-label"));
      for (const h of unnamed(".noUi-handle")) h.setAttribute("aria-label", title || "slider");
      for (const c of unnamed("input[type=checkbox]")) c.setAttribute("aria-label", String(v.model.label || title || "option"));
      for (const r of unnamed("input[type=range]")) r.setAttribute("aria-label", title ? `${title}: step` : "step");
      for (const b of unnamed("button")) {
        if (b.textContent.trim()) continue;
        const kind = [...b.classList].find((k) => PLAYER_BUTTONS[k]);
        b.setAttribute("aria-label", PLAYER_BUTTONS[kind] || title || "button");
      }
    }
    for (const child of (v.children ? v.children() : [])) walk(child);
  })(rootView);
}

function nameFigure(fig) {
  for (const root of Bokeh.index.roots) if (fig.el.contains(root.el)) nameControls(root);
}

// ------------------------------------------------------------------ text alternative

// What a figure shows now, in words: its readouts (the numbers beside its plots; the keys
// the build lists in data-readouts) and its plots' titles, as text in a region under the
// figure (its aria-describedby). Once the figure is live the region is polite: a screen
// reader says it again DESCRIBE_MS after Python's last redraw, so a drag is read once.
const DESCRIBE_MS = 700;
const words = (el) => el.textContent.replace(/\s+/g, " ").trim();

function readoutText(html) {
  const t = document.createElement("template");
  t.innerHTML = html;
  const parts = [];
  for (const node of t.content.childNodes) {
    const rows = node.nodeType === 1 ? (node.matches("tr") ? [node] : [...node.querySelectorAll("tr")]) : [];
    if (!rows.length) {
      if (words(node)) parts.push(words(node));
      continue;
    }
    for (const tr of rows) {
      const [head, ...rest] = [...tr.children].map(words);
      const values = rest.filter(Boolean).join(", ");
      const row = head && values ? `${head}: ${values}` : head || values;
      if (row) parts.push(row);
    }
  }
  return parts.join("; ");
}

function describeFigure(fig, root) {
  if (!fig.now || !root) return;
  const models = [root, ...root.references()];
  const readouts = new Map();
  for (const m of models) {
    for (const c of m.css_classes || []) if (c.startsWith("out-")) readouts.set(c.slice(4), m.text);
  }
  const titles = models.filter((m) => m.type === "Figure" && m.title && m.title.text).map((m) => m.title.text.replace(/\n/g, " "));
  const said = (fig.now.dataset.readouts || "").split(" ").filter((k) => readouts.has(k)).map((k) => readoutText(readouts.get(k)));
  const text = [...titles, ...said].filter(Boolean).join(". ");
  if (fig.now.textContent !== text) fig.now.textContent = text;
}

G.readoutText = readoutText;     // (the browser tests read CPython's readouts with it)
G.linkValue = (id, key) => linkValue(FIGS.get(id), key);     // (and the live controls with this)

function describeSoon(fig) {
  if (!fig) return;
  clearTimeout(fig.describeTimer);
  fig.describeTimer = setTimeout(() => describeFigure(fig, fig.liveRoot), DESCRIBE_MS);
}

function becameLive(fig) {
  observer.unobserve(fig.el);
  nameFigure(fig);
  describeFigure(fig, fig.liveRoot);
  if (fig.now) fig.now.setAttribute("aria-live", "polite");    // from now on, a change is read out
  fig.live = true;
  lastLive = performance.now();
  setState(fig, "live", LIVE);
  if (fig.bar) fig.bar.hidden = true;
  mark(`live:${fig.id}`);
  // then the link's values, for the controls the reader left alone (not awaited: each
  // waits for Python's "idle", a later message)
  applyLink(fig, fig.liveRoot, fig.carried, pythonIdle).then((n) => {
    if (n) fig.status.textContent = `${LIVE} It opened at the link's settings.`;
  }).catch((e) => console.warn(`a link's settings were not all applied: ${e}`));
}

const LIVE = "Live: Python is running in your browser.";
let idleWaiters = [];
const pythonIdle = () => (busy ? new Promise((r) => idleWaiters.push(r)) : Promise.resolve());

function flushQueue() {
  // Python is idle: the changes that waited, those of one figure's document at a time.
  if (queue.length) {
    const doc = queue[0].document;
    const fig = DOCS.get(doc);
    const events = queue.filter((e) => e.document === doc);
    queue = queue.filter((e) => e.document !== doc);
    busy = true;
    worker.postMessage({ type: "patch", figure: fig.id, patch: doc.create_json_patch(events) });
  } else {
    busy = false;
    const waiting = idleWaiters;
    idleWaiters = [];
    for (const resolve of waiting) resolve();
  }
}

function onProgress(msg) {
  const label = STAGES[msg.stage] || msg.stage;
  const frac = { runtime: 0.05, packages: 0.15, figures: 0.85 }[msg.stage] ?? 0;
  const span = { runtime: 0.1, packages: 0.7, figures: 0.15 }[msg.stage] ?? 0;
  const value = frac + (msg.total ? (span * msg.done) / msg.total : 0);
  mark(`stage:${msg.stage}:${msg.done}`, msg.t - performance.timeOrigin);
  if (msg.boot) G.boot = msg.boot;   // how Python started: {path: "snapshot"|"normal", reason}
  for (const fig of FIGS.values()) {
    if (fig.live || fig.el.dataset.state === "error") continue;
    const count = msg.total ? ` ${msg.done}/${msg.total}` : "";
    setState(fig, "loading", `Loading Python in your browser: ${label}${count}. The controls work; changes apply when live.`);
    if (fig.bar) { fig.bar.hidden = false; fig.bar.value = value; }
  }
}

async function onMessage(msg) {
  switch (msg.type) {
    case "progress": onProgress(msg); break;
    case "built":
      try { await onBuilt(msg); } catch (e) { onFatal(`could not show the live figures: ${e.message || e}`); }
      break;
    case "render":
      try { await onRender(msg); } catch (e) { onFatal(`could not show the live figures: ${e.message || e}`); }
      break;
    case "patch":
      try { patching += 1; FIGS.get(msg.figure).doc.apply_json_patch(msg.patch, msg.buffers); } finally { patching -= 1; }
      requestAnimationFrame(() => nameFigure(FIGS.get(msg.figure)));
      describeSoon(FIGS.get(msg.figure));
      break;
    case "idle": flushQueue(); break;
    case "rehearsed": mark("rehearsed", msg.t - performance.timeOrigin); G.rehearsal = { ms: msg.ms, left: msg.left, sent: msg.sent }; break;
    case "error": {
      const fig = msg.figure && FIGS.get(msg.figure);
      if (fig) showError(fig, msg.message); else console.error(msg.message);
      break;
    }
    case "fatal": onFatal(msg.message); break;
  }
}

function onFatal(message) {
  mark("fatal");
  for (const fig of FIGS.values()) if (!fig.live) showError(fig, message);
}

// Worker messages, in order (a message waits for the one before it to be handled).
mark("guide_js");
let chain = Promise.resolve();
const enqueue = (m) => { chain = chain.then(() => onMessage(m)).catch((e) => console.error(e)); };
const pending = G.queue;
G.queue = { push: enqueue };
for (const m of pending) enqueue(m);

// Interactive previews: a figure in or near the viewport gets its pre-rendered Bokeh
// document at once, the others in the page's idle time (below); their posters show
// meanwhile. A figure coming into view while Python loads is built first.
const observer = new IntersectionObserver((entries) => {
  let seen = false;
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    const fig = FIGS.get(entry.target.dataset.figure);
    if (fig.live) continue;
    preview(fig);
    seen = true;
  }
  if (seen && FIGS.size > 1) sendFocus();
}, { rootMargin: "150px" });
for (const fig of FIGS.values()) observer.observe(fig.el);

// The previews out of view are drawn too, one at a time when the page is idle: an adopted
// preview is the live figure, so drawing it now is work taken off the moment Python is ready.
const idle = (timeout) => new Promise((r) => (window.requestIdleCallback ? requestIdleCallback(r, { timeout }) : setTimeout(r, 50)));
bokehReady.then(async () => {
  for (const fig of FIGS.values()) {
    await idle(1000);
    if (!fig.live && !fig.previewing) await preview(fig);
  }
}).catch(() => {});

function sendFocus() {
  // Python builds the figures nearest the viewport first.
  const h = window.innerHeight;
  const distance = (el) => {
    const r = el.getBoundingClientRect();
    return r.bottom < 0 ? -r.bottom : r.top > h ? r.top - h : 0;
  };
  const order = [...FIGS.values()].map((fig, i) => [distance(fig.el), i, fig.id])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
  worker?.postMessage({ type: "focus", figures: order });
}
if (FIGS.size > 1) sendFocus();
