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
// patch, buffers}, idle, error {figure, message} (a callback failed), rehearsed {ms, left,
// sent} (controls moved and put back, see rehearseAll: ms spent, controls left out, patches
// it sent), fatal {message} (the runtime failed).
// Messages from the page: start {figures, runtime, boot}, focus {figures} (the order to build
// them in), adopted {figure}, embed {figure}, rendered {figure}, patch {figure, patch}.
// `boot` "normal" skips the memory snapshot (boot below); the progress message that ends
// the "runtime" stage says which path was taken: boot {path: "snapshot"|"normal", reason}.
// `runtime` is where the build put things (the page carries it; builder/pages.py
// worker_config): pyodide (folder), module, lock, package (the guide's wheel),
// panel_cdn_root; its paths are relative to the site's root.

const ROOT = new URL("../", import.meta.url).href;            // the site's root folder
const post = (msg) => self.postMessage(msg);
const message = (e) => String(e && e.message ? e.message : e);
const now = () => performance.timeOrigin + performance.now();  // comparable with the page's clock
const progress = (stage, done, total) => post({ type: "progress", stage, done, total, t: now() });

let pyodide = null;
let session = null;
const loadErrors = [];

let focus = [];   // figure ids in the order the page wants them built

// Work done for later (rehearsing the controls, keeping the snapshot for the next page)
// waits until the reader has sent no change for QUIET_MS; keeping the snapshot also until
// AFTER_LIVE_MS after the figures went live (as the page's own work: guide.js whenQuiet).
const QUIET_MS = 1000;
const AFTER_LIVE_MS = 3000;
let lastPatch = -Infinity;          // when the page last sent a reader's change
function whenQuiet(fn) {
  const left = lastPatch + QUIET_MS - performance.now();
  if (left > 0) setTimeout(() => whenQuiet(fn), left); else fn();
}

let patchesSent = 0;
function sendPatch(patch, buffers, figure) {
  patchesSent += 1;
  post({ type: "patch", figure, patch, buffers });
}

// ---- Once every figure is live: controls moved to another value and back
// (PageSession.rehearse), so that the browser has compiled the code a reader's first move
// runs. Each control in two tasks, the move (rehearse_move) and the move back
// (rehearse_back), so a reader's change waits for one of them at most (a change to the
// same figure, for the move back too), and none while the reader is changing things (their
// changes run that code anyway): every control of the figure nearest the viewport first
// (the "focus" order), then the next figure's, until REHEARSAL_MS of the worker's time is
// spent.
const REHEARSAL_MS = 500;
let builtFigures = null;           // the figures Python built, once it has built them all
const linked = new Set();
let rehearsing = false;

function rehearseAll() {
  if (rehearsing || !builtFigures || !builtFigures.every((id) => linked.has(id))) return;
  rehearsing = true;
  const order = [...focus.filter((id) => builtFigures.includes(id)), ...builtFigures.filter((id) => !focus.includes(id))];
  const todo = order.flatMap((id) => JSON.parse(session.rehearsal(id)).map((key) => [id, key]));
  let spent = 0;
  let sent = 0;
  const next = () => {
    const item = todo.shift();
    if (!item || spent >= REHEARSAL_MS) {
      post({ type: "rehearsed", ms: Math.round(spent), left: todo.length + (item ? 1 : 0), sent, t: now() });
      return;
    }
    const [id, key] = item;
    step(() => session.rehearse_move(id, key));
    later(() => { step(() => session.rehearse_back(id)); later(next); });
  };
  const later = (fn) => setTimeout(() => whenQuiet(fn), 0);     // a task of its own, the reader quiet
  const step = (call) => {
    const t0 = performance.now();
    const before = patchesSent;
    const failure = call();
    spent += performance.now() - t0;
    sent += patchesSent - before;
    if (failure) post({ type: "error", ...JSON.parse(failure) });
  };
  later(next);
}

// ---- Booting Python: restore the build's memory snapshot (static/snapshot.js,
// builder/snapshot.py), or boot and import normally. `bootMode` "normal" (the page's
// ?boot=normal) skips the snapshot. Any failure of the snapshot (fetch, decompress, another
// runtime build, restore) falls back to the normal boot; the path taken is reported.

async function boot(runtime, bootMode) {
  const snap = runtime.snapshot;
  if (!snap) return { pyodide: await normalBoot(runtime), path: "normal", reason: "the build made no snapshot" };
  if (bootMode === "normal") return { pyodide: await normalBoot(runtime), path: "normal", reason: "asked for (boot=normal)" };
  try {
    const { pyodide, held } = await restoreSnapshot(runtime, snap);
    return { pyodide, path: "snapshot", reason: snapshotSource, steps: restoreSteps, held,
             ...(snapshotSource === "network" ? { transfer: snapshotTransfer } : {}) };
  } catch (e) {
    const reason = message(e);
    console.warn(`memory snapshot not used (${reason}); booting Python normally`);
    if (snapshotSource === "cache") within(STORAGE_TIMEOUT_MS, caches.delete(`guide-snapshot-${snap.id}`), null);   // next page: the server's copy
    return { pyodide: await normalBoot(runtime), path: "normal", reason: `snapshot failed: ${reason}` };
  }
}

// Pyodide's runtime module (sw.js RUNTIME_MODULES): from the network while online, where
// Chrome keeps its compiled code; when that fails, from the offline copy. It defines
// _createPyodideModule, which loadPyodide then uses instead of importing the module itself.
async function importRuntime(runtime) {
  const url = ROOT + runtime.pyodide + "pyodide.asm.js";
  try {
    await import(url);
  } catch (e) {
    await import(url + "?copy");
  }
}

async function normalBoot(runtime) {
  const pyodideModule = import(ROOT + runtime.module);
  // The guide's wheel depends on everything the figures import, so one call loads it all.
  // Its wheels are fetched (into the HTTP cache) while Pyodide boots, which is CPU-bound.
  const lockFile = readLock(runtime);
  const wheels = lockFile.then(({ lock }) => closure(lock.packages, [runtime.package]).map((n) => lock.packages[n].file_name));
  wheels.then((files) => {
    for (const file of files) fetch(ROOT + runtime.pyodide + file, { priority: "low" }).catch(() => {});
  }).catch(() => {});
  const { loadPyodide } = await pyodideModule;
  await importRuntime(runtime);
  const pyodide = await withRuntimeCreation(runtime, (create) => (settings) => guardedCreate(runtime, create, settings),
    async () => loadPyodide({ indexURL: ROOT + runtime.pyodide, lockFileURL: (await lockFile).url, fullStdLib: false }));
  const total = (await wheels).length;
  let loaded = 0;
  progress("packages", 0, total);
  await pyodide.loadPackage([runtime.package], {
    messageCallback: (m) => { if (m.startsWith("Loaded")) progress("packages", (loaded += 1), total); },
    errorCallback: (m) => loadErrors.push(m),
    checkIntegrity: true,
  });
  if (loadErrors.length) throw new Error("could not load the figures' Python packages: " + loadErrors.join("; "));
  return pyodide;
}

// Pyodide's lock file, read and parsed here once (both boots use it): a damaged one fails
// with its name at once, and Pyodide is given it as a blob: URL, so its own read cannot fail
// later with a rejection nobody is waiting for yet.
let lockRead = null;
function readLock(runtime) {
  lockRead ??= (async () => {
    const r = await fetch(ROOT + runtime.lock);
    if (!r.ok) throw new Error(`${runtime.lock}: HTTP ${r.status}`);
    const text = await r.text();
    let lock;
    try {
      lock = JSON.parse(text);
    } catch (e) {
      throw new Error(`${runtime.lock} is not JSON (${message(e)})`);
    }
    return { lock, url: URL.createObjectURL(new Blob([text], { type: "application/json" })) };
  })();
  return lockRead;
}

const STORAGE_TIMEOUT_MS = 3000;   // browser storage has been seen to hang: then do without it
let snapshotSource = "";           // where the snapshot's bytes came from: "cache" or "network"
const snapshotTransfer = {};       // from the network, each file's coding: "br" or "gzip" (the host's,
                                   // decoded by the browser), or "gunzip" (the .gz, decoded here)
let saveSnapshot = null;           // keeps the decompressed snapshot for the next page (after going live)
const restoreSteps = {};           // ms after the worker's start at which each restore step ended
const step = (name) => { restoreSteps[name] = Math.round(performance.now()); };

// Settles with `promise`, or with `fallback` after `ms` (or if it fails).
function within(ms, promise, fallback) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(fallback), ms);
    Promise.resolve(promise).then((v) => { clearTimeout(timer); resolve(v); },
                                  () => { clearTimeout(timer); resolve(fallback); });
  });
}

const chunksOf = (stream) => readerChunks(stream.getReader());

async function* readerChunks(reader) {
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally { reader.releaseLock(); }
}

// A response's bytes, gunzipped unless the host already decoded them (Content-Encoding).
async function* gunzipped(response) {
  const reader = response.body.getReader();
  const first = await reader.read();
  if (first.done) throw new Error(`${response.url}: empty`);
  const rest = () => readerChunks(reader);
  if (!(first.value[0] === 0x1f && first.value[1] === 0x8b)) {
    yield first.value;
    yield* rest();
    return;
  }
  const gunzip = new DecompressionStream("gzip");
  const writer = gunzip.writable.getWriter();
  const pump = (async () => {
    await writer.write(first.value);
    for await (const c of rest()) await writer.write(c);
    await writer.close();
  })();
  pump.catch((e) => writer.abort(e).catch(() => {}));
  yield* chunksOf(gunzip.readable);
  await pump;
}

async function fill(buf, chunks, what) {
  let off = 0;
  for await (const c of chunks) {
    if (off + c.length > buf.length) throw new Error(`${what}: longer than the ${buf.length} bytes expected`);
    buf.set(c, off);
    off += c.length;
  }
  if (off !== buf.length) throw new Error(`${what}: ${off} of ${buf.length} bytes`);
  return buf;
}

// One of the snapshot's files from the server, decompressed: first as <name>.bin, which a
// host serving precompressed copies answers with its brotli (or gzip) copy, decoded by the
// browser; a host that does not answers 404 (or anything else: checked by its first bytes),
// and <name>.bin.gz is fetched and gunzipped here (builder/snapshot.py). `magicName` is the
// export of static/snapshot.js (`helpers`, that module, loading meanwhile) saying how the
// file begins.
async function fromServer(url, magicName, helpers) {
  try {
    const r = await fetch(ROOT + url.replace(/\.gz$/, ""));
    if (r.ok) {
      const { startsWith, [magicName]: magic } = await helpers;
      const reader = r.body.getReader();
      let head = new Uint8Array(0);          // a decoder may hand over a few bytes at first
      while (head.length < magic.length) {
        const { done, value } = await reader.read();
        if (done) break;
        const joined = new Uint8Array(head.length + value.length);
        joined.set(head);
        joined.set(value, head.length);
        head = joined;
      }
      if (startsWith(head, magic)) {
        const chunks = (async function* () { yield head; yield* readerChunks(reader); })();
        return { chunks, how: r.headers.get("Content-Encoding") || "identity" };      // decoded by the browser
      }
      reader.cancel().catch(() => {});
    }
  } catch (e) { /* the network, or a copy that did not decode: the .gz is next */ }
  const r = await fetch(ROOT + url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return { chunks: gunzipped(r), how: "gunzip" };
}

// The snapshot's two big files, decompressed into buffers of their known sizes: from Cache
// Storage (a cache named by the snapshot's id, written after an earlier page went live),
// else from the server (brotli or gzip, through the HTTP cache).
async function snapshotFiles(snap, helpers) {
  const cacheName = `guide-snapshot-${snap.id}`;
  const wanted = [[snap.memory, snap.memory_size], [snap.files, snap.files_size]];
  const cache = typeof caches === "undefined" ? null : await within(STORAGE_TIMEOUT_MS, caches.open(cacheName), null);
  const hits = cache ? await within(STORAGE_TIMEOUT_MS, Promise.all(wanted.map(([u]) => cache.match(ROOT + u))), []) : [];
  const buffers = wanted.map(([, size]) => new Uint8Array(size));
  const fromCache = hits.length === 2 && hits.every(Boolean);
  snapshotSource = fromCache ? "cache" : "network";
  const done = wanted.map(async ([url], i) => {
    if (fromCache) {
      const read = await within(STORAGE_TIMEOUT_MS * 3, fill(buffers[i], chunksOf(hits[i].body), url), null);
      if (read) return read;
      caches.delete(cacheName).catch(() => {});     // the next page reads the server's copy
      throw new Error(`the snapshot kept in Cache Storage did not read back (${url})`);
    }
    const { chunks, how } = await fromServer(url, i ? "FILES_MAGIC" : "SNAPSHOT_MAGIC", helpers);
    snapshotTransfer[i ? "files" : "memory"] = how;
    return fill(buffers[i], chunks, url);
  });
  if (!fromCache && cache) {
    saveSnapshot = async () => {
      const [memory, files] = await Promise.all(done);
      for (const name of await caches.keys()) {          // an older build's snapshot
        if (name.startsWith("guide-snapshot-") && name !== cacheName) await caches.delete(name);
      }
      await cache.put(ROOT + snap.memory, new Response(memory));
      await cache.put(ROOT + snap.files, new Response(files));
    };
  }
  return { memory: buffers[0], memoryDone: done[0], filesDone: done[1] };
}

// What Pyodide installs as the standard library when restoring: an empty zip (its end
// record only). The snapshot's installed files hold the standard library it needs and are
// written over it before Python runs (builder/snapshot.py finish).
const EMPTY_ZIP = "data:application/zip;base64,UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==";

async function restoreSnapshot(runtime, snap) {
  const pyodideModule = import(ROOT + runtime.module);
  const helpers = import("./snapshot.js");
  readLock(runtime).catch(() => {});     // read while the snapshot downloads; awaited below
  const metaP = fetch(ROOT + snap.meta).then((r) => { if (!r.ok) throw new Error(`${snap.meta}: HTTP ${r.status}`); return r.json(); });
  const { memory, memoryDone, filesDone } = await snapshotFiles(snap, helpers);
  step("storage");
  // failures surface where these are awaited; none is left unhandled meanwhile
  for (const p of [metaP, memoryDone, filesDone]) p.catch(() => {});
  const { loadPyodide, version } = await pyodideModule;
  if (version !== snap.pyodide) throw new Error(`the snapshot is of Pyodide ${snap.pyodide}, the runtime is ${version}`);
  const { deserializer, unpackFiles, writeFiles, replayDsos, snapshotBuildId } = await helpers;
  // Pyodide creates the wasm runtime through this global (pyodide.asm.js); it is wrapped
  // for this one boot so that the installed files and shared libraries are in place, and
  // the snapshot's bytes are all there, before Pyodide copies the snapshot into memory.
  // The runtime starts while the snapshot is still downloading.
  await importRuntime(runtime);
  const restored = await withRuntimeCreation(runtime, (create) => async (settings) => {
    // The snapshot's file leaves out the zero pages at the top of its memory
    // (builder/snapshot.py trim_memory): the memory is made the full size it had, not the
    // file's length, which is what Pyodide would make it.
    const meta = await metaP;
    if (meta.build_id !== snap.build_id) throw new Error("the snapshot's metadata is of another runtime build");
    if (!(meta.size >= memory.length)) throw new Error(`the snapshot's metadata gives it ${meta.size} bytes, its file has ${memory.length}`);
    settings.INITIAL_MEMORY = meta.size;
    const M = await guardedCreate(runtime, create, settings);
    step("runtime");
    writeFiles(M, unpackFiles(await filesDone));
    step("files");
    await replayDsos(M, meta);
    step("libraries");
    await memoryDone;
    step("snapshot_bytes");
    if (snapshotBuildId(memory) !== snap.build_id) throw new Error("the snapshot is of another runtime build");
    return M;
  }, async () => loadPyodide({ indexURL: ROOT + runtime.pyodide, lockFileURL: (await readLock(runtime)).url, fullStdLib: false,
                               stdLibURL: EMPTY_ZIP, _loadSnapshot: memory, _snapshotDeserializer: deserializer }));
  // The standard library came with the installed files, less what is in memory: Python's
  // zip importers still hold the directory of Pyodide's full zip and must read this one's.
  // Then what the snapshot holds ready: the figures built (widgets.runtime.prebuild) and
  // how many objects Python's garbage collector leaves alone (frozen). Python functions are
  // called, not source run: runPython parses and compiles its source first.
  const held = JSON.parse(callPython(restored, "widgets.runtime", "after_restore"));
  Object.assign(restored.loadedPackages, (await metaP).loaded);
  step("restored");
  return { pyodide: restored, held };
}

// module.name(...args), its proxies released.
function callPython(py, module, name, ...args) {
  const mod = py.pyimport(module);
  try {
    return mod[name](...args);
  } finally {
    mod.destroy();
  }
}

// After the figures went live: keep the decompressed snapshot for the next page, once the
// reader has left them alone for a moment.
function afterLive() {
  const save = saveSnapshot;
  saveSnapshot = null;
  if (save) setTimeout(() => whenQuiet(() => within(30000, save(), null).catch(() => {})), AFTER_LIVE_MS);
}

// ---- When the runtime fails to start. Pyodide 0.27's own instantiateWasm only logs a
// failure of pyodide.asm.wasm ("wasm instantiation failed!") and its promise never settles:
// the page would say "starting Python" forever. So the runtime's creation is raced against
// the first WebAssembly instantiation it makes (the runtime's own) failing, and against
// Emscripten's abort; then `bootFailure` names the runtime files that are not the build's.

// `load()` with the global Pyodide creates the runtime through (_createPyodideModule, defined
// by pyodide.asm.js) replaced, for that one boot, by `wrap(create)`; put back afterwards.
async function withRuntimeCreation(runtime, wrap, load) {
  const create = globalThis._createPyodideModule;
  if (typeof create !== "function") throw new Error(`${runtime.pyodide}pyodide.asm.js defined no _createPyodideModule`);
  globalThis._createPyodideModule = wrap(create);
  try {
    return await load();
  } finally {
    globalThis._createPyodideModule = create;
  }
}

async function guardedCreate(runtime, create, settings) {
  let fail;
  const failed = new Promise((_, reject) => { fail = reject; });
  const wasm = runtime.pyodide + "pyodide.asm.wasm";
  const originals = { instantiate: WebAssembly.instantiate, instantiateStreaming: WebAssembly.instantiateStreaming };
  const restore = () => Object.assign(WebAssembly, originals);
  for (const [name, original] of Object.entries(originals)) {
    WebAssembly[name] = function (...args) {
      restore();                          // only the first: later ones are shared libraries
      const p = original.apply(WebAssembly, args);
      p.catch((e) => fail(new Error(`${wasm} did not load as WebAssembly: ${message(e)}`)));
      return p;
    };
  }
  const onAbort = settings.onAbort;
  settings.onAbort = (what) => {
    fail(new Error(`the Python runtime stopped while starting: ${what}`));
    if (onAbort) onAbort(what);
  };
  try {
    return await Promise.race([create(settings), failed]);
  } finally {
    restore();
  }
}

// The runtime files (builder/pages.py worker_config "files": path -> [bytes, sha256]) that
// are missing or differ from the build's, each as a sentence naming the file.
async function damagedFiles(runtime) {
  const checks = Object.entries(runtime.files || {}).map(async ([path, [size, sha256]]) => {
    let bytes;
    try {
      const r = await fetch(ROOT + path, { cache: "no-store" });
      if (!r.ok) return `${path} is missing from the site (HTTP ${r.status})`;
      bytes = new Uint8Array(await r.arrayBuffer());
    } catch (e) {
      return `${path} could not be fetched (${message(e)})`;
    }
    if (bytes.length !== size) {
      return `${path} has ${bytes.length.toLocaleString("en")} bytes, the build wrote ${size.toLocaleString("en")} (truncated or replaced)`;
    }
    if (crypto.subtle) {
      const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
      const hex = [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
      if (hex !== sha256) return `${path} is not the file the build wrote (its sha256 differs)`;
    }
    return null;
  });
  return (await within(8000, Promise.all(checks), [])).filter(Boolean);
}

// What the page shows when Python could not start: the damaged files first, then what the
// runtime said.
async function bootFailure(runtime, e) {
  const damaged = await damagedFiles(runtime);
  const said = message(e);
  return damaged.length ? `Python could not start: ${damaged.join("; ")}. (The runtime said: ${said})`
                        : `Python could not start: ${said}`;
}

// ---- After boot: the page's figures.

async function start(figures, runtime, bootMode) {
  progress("runtime", 0, 1);
  let booted;
  try {
    booted = await boot(runtime, bootMode);
  } catch (e) {
    throw new Error(await bootFailure(runtime, e));
  }
  pyodide = booted.pyodide;
  post({ type: "progress", stage: "runtime", done: 1, total: 1, t: now(),
         boot: { path: booted.path, reason: booted.reason, ...(booted.steps ? { steps: booted.steps } : {}),
                 ...(booted.held ? { held: booted.held } : {}),
                 ...(booted.transfer ? { transfer: booted.transfer } : {}) } });
  progress("figures", 0, figures.length);
  session = callPython(pyodide, "widgets.runtime", "open_session", runtime.panel_cdn_root);
  await buildFigures(figures);
}

async function buildFigures(figures) {
  // One figure at a time, the one the page asked for first; between two, the page's
  // messages (a figure adopted, a reader's change to a live figure) are handled.
  const todo = [...figures];
  const built = [];
  for (let done = 0; todo.length; done += 1) {
    const next = focus.find((id) => todo.includes(id)) ?? todo[0];
    todo.splice(todo.indexOf(next), 1);
    const result = JSON.parse(session.build(next));
    if (!result.error) built.push(next);
    post({ type: "built", ...result, t: now() });
    progress("figures", done + 1, figures.length);
    await new Promise((r) => setTimeout(r, 0));
  }
  afterLive();   // every figure built; the page adopts or embeds them within moments
  builtFigures = figures.filter((id) => built.includes(id));    // in the page's order
  rehearseAll();
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

// While Python starts, a failure inside Pyodide also surfaces as an error or a rejection
// that nobody catches (its lock file's promise, a callback of the runtime): those would
// reach the page as uncaught errors beside the figure's error state, which says what failed
// (start, bootFailure). Until the start is over they are said here as warnings instead.
let starting = true;
for (const type of ["error", "unhandledrejection"]) {
  self.addEventListener(type, (event) => {
    if (!starting) return;
    event.preventDefault();
    console.warn(`while Python started: ${message(type === "error" ? event.error ?? event.message : event.reason)}`);
  });
}

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === "start") {
      try {
        await start(msg.figures, msg.runtime, msg.boot);
      } finally {
        setTimeout(() => { starting = false; }, 0);    // after what the failure left queued
      }
    } else if (msg.type === "focus") {
      focus = msg.figures;
    } else if (msg.type === "adopted" || msg.type === "rendered") {
      session.link(msg.figure, sendPatch);
      linked.add(msg.figure);
      rehearseAll();
    } else if (msg.type === "embed") {
      post({ type: "render", figure: msg.figure, doc: session.render(msg.figure), t: now() });
    } else if (msg.type === "patch") {
      lastPatch = performance.now();
      try {
        const failure = session.apply_patch(msg.figure, msg.patch);
        if (failure) post({ type: "error", ...JSON.parse(failure) });
      } finally {
        post({ type: "idle" });
      }
    }
  } catch (e) {
    post({ type: "fatal", message: message(e) });
  }
};
