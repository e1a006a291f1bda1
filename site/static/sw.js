// The guide's service worker: offline reading of the whole guide after one visit.
//
// The build puts this file at the site's root (sw.js), so its scope is the whole site.
// static/offline.js registers it once the page's figures are live (or the page is idle),
// then asks it to "sync": the worker fetches MANIFEST.json (every file of the build with
// its size and sha256) and copies every file it lists, except the precompressed .gz/.br
// copies (offlineFiles), into a cache named by the manifest's own sha256 ("guide-offline-<hash>"). Each file is
// checked against the manifest's sha256 before it is stored, so an offline copy is always
// one whole build. Files the previous copy already holds with the same sha256 are copied
// from it rather than downloaded again. The manifest is stored last: a cache holding
// MANIFEST.json is complete. Then older copies are deleted. (The page's Python worker keeps
// the decompressed memory snapshot in caches named "guide-snapshot-<id>": not ours to touch.)
//
// Requests inside the scope:
//   pages (*.html, navigations) and MANIFEST.json: network first, the offline copy when
//     the network fails;
//   the pages' classic scripts and the Python worker's big module (INSTALL_SCRIPTS and
//     RUNTIME_MODULES, below): not answered here while the browser is online, so they come
//     from the network (the browser's HTTP cache); offline, or asked for with "?copy" (a
//     page or worker whose load of one failed), from the scripts' own cache or the copy;
//   every other file: from the offline copy when its sha256 there equals the one in the
//     newest manifest seen from the network (so a file a new build changed is fetched,
//     never served stale next to the new pages), else the network, then the copy.
// So a page opened online is always the newest build; the offline copy follows it in the
// background. A page that had to be opened from the copy while a newer build was
// deployed is told to reload once the newer copy is complete.
//
// Every Cache Storage call has a time limit; one that hangs marks storage unusable for
// this worker's life and everything goes to the network. Nothing is fetched from any
// other host. Messages to pages: {type: "offline", state: "saving" | "ready" | "failed",
// done, total, bytes, totalBytes, updated, reload, offline (the network is unreachable),
// stale (a newer build could not be saved; the older copy stays), compile (paths of the
// modules to run once from a copy just saved: RUNTIME_MODULES), message}. Messages from
// pages: {type: "sync"} (copy the newest build), {type: "reader"} (the page's reader just
// changed a figure: the copy pauses until QUIET_MS have passed without one).

// The pages' classic scripts (BokehJS and Panel's bundle), path -> sha256, written in by the
// build (builder/pages.py). This worker stores them during its install event, in a cache of
// their own ("guide-scripts-<hash of this list>"), and serves them from there offline.
// Online it leaves them, and RUNTIME_MODULES, to the network: Chrome keeps the code it
// compiled for a script beside the script's HTTP cache entry once the script was loaded
// twice, and runs a later page's copy from it, which it does not do for a script this
// worker answers (Chromium 156: nor for one stored at install, which Chromium up to 155
// compiled whole). Measured on ch04 (BENCHMARKS.md, The big scripts from the HTTP cache):
// BokehJS ready about 150 ms sooner on the page, Python's runtime module compiled in 4-7 ms
// instead of 65. A build that changes one of them changes this file: the new worker
// installs and stores them anew, and its activation deletes the older list's cache.
const INSTALL_SCRIPTS = {};
const INSTALL_MS = 20000;       // the longest storing them may hold up the install

// The module scripts the page's Python worker imports that are big enough to matter (Pyodide's
// pyodide.asm.js, 1.2 MB), written in by the build. Chrome keeps a script's compiled code
// from its second load on, so the message that a copy is saved names them ("compile"), and
// the page that saved it runs them, and its classic scripts, once more (static/offline.js,
// static/compile.js): the reader's next page runs them from kept code.
const RUNTIME_MODULES = [];
const SCRIPTS_PREFIX = "guide-scripts-";
const COPY_QUERY = "?copy";     // a request for one of them that the network must not answer

// Left to the network: INSTALL_SCRIPTS and RUNTIME_MODULES, online, unless asked for from the copy.
const toNetwork = (path, url) => (path in INSTALL_SCRIPTS || RUNTIME_MODULES.includes(path)) &&
  url.search !== COPY_QUERY && self.navigator.onLine !== false;

const PREFIX = "guide-offline-";
const ROOT = new URL("./", self.location.href).href;      // the site's root folder
const MANIFEST = "MANIFEST.json";
const STORAGE_MS = 4000;        // the longest a Cache Storage call may take
const MANIFEST_WAIT_MS = 1500;  // the longest a file waits for the manifest being fetched
const PARALLEL = 4;             // files copied at once
const QUIET_MS = 1000;          // a page's reader changed a figure this recently: the copy waits

let storageBroken = "";         // why Cache Storage is not used any more ("" while it is)
let current = null;             // the complete offline copy: {name, hash, files}
let currentLoad = null;         // promise of `current`, read from Cache Storage once
let latest = null;              // the newest manifest from the network: {hash, files, text}
let refreshing = null;          // the manifest fetch in flight
let syncing = null;             // the copy in flight
const fromCopy = new Set();     // ids of pages that were opened from the offline copy
let readerAt = -Infinity;       // when a page last said its reader changed a figure ("reader")

// ------------------------------------------------------------------ storage, with time limits

function limit(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

async function storage(what, call) {
  if (storageBroken) throw new Error(`offline storage unavailable (${storageBroken})`);
  try {
    return await limit(Promise.resolve().then(call), STORAGE_MS, what);
  } catch (e) {
    if (/no answer in/.test(e.message)) storageBroken = e.message;
    throw e;
  }
}

const open = (name) => storage(`caches.open(${name})`, () => caches.open(name));

// ------------------------------------------------------------------ manifests

async function sha256(buffer) {
  const digest = await crypto.subtle.digest("SHA-256", buffer);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function parseManifest(text) {
  const files = JSON.parse(text).files;
  if (!files || typeof files !== "object") throw new Error("MANIFEST.json lists no files");
  return { hash: (await sha256(new TextEncoder().encode(text))).slice(0, 20), files, text };
}

// The complete offline copy, if any (read once per worker start).
function loadCurrent() {
  currentLoad ||= (async () => {
    const names = (await storage("caches.keys", () => caches.keys())).filter((n) => n.startsWith(PREFIX));
    for (const name of names) {
      const cache = await open(name);
      const stored = await storage("cache.match", () => cache.match(ROOT + MANIFEST));
      if (!stored) continue;
      const m = await parseManifest(await stored.text());
      if (PREFIX + m.hash === name) return (current = { name, hash: m.hash, files: m.files });
    }
    return null;
  })().catch((e) => { console.warn(`offline copy not read: ${e.message}`); return null; });
  return currentLoad;
}

// The newest manifest from the network (one fetch at a time); null when offline.
function refreshManifest() {
  refreshing ||= (async () => {
    try {
      const r = await fetch(ROOT + MANIFEST, { cache: "no-cache" });
      if (!r.ok) throw new Error(`MANIFEST.json: HTTP ${r.status}`);
      return (latest = await parseManifest(await r.text()));
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

// The newest manifest known, waiting a little for one being fetched.
async function newestManifest() {
  if (refreshing) await limit(refreshing, MANIFEST_WAIT_MS, "MANIFEST.json").catch(() => {});
  return latest;
}

// Files the offline copy holds: every file of the build but the precompressed copies (X.gz
// or X.br of a listed X) and the memory snapshot's two big files (vendor/snapshot/*.bin.gz,
// .bin.br): the page's worker keeps them itself, decompressed, once a page went live
// ("guide-snapshot-<id>"), and without them a page offline boots Python from the copy's wheels.
const SNAPSHOT_FILE = /^vendor\/snapshot\/[^/]+\.bin\.(gz|br)$/;
function offlineFiles(files) {
  return Object.keys(files).filter((p) => p !== MANIFEST && !SNAPSHOT_FILE.test(p) &&
    !(/\.(gz|br)$/.test(p) && p.replace(/\.(gz|br)$/, "") in files));
}

// ------------------------------------------------------------------ pages

async function broadcast(msg) {
  const pages = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const page of pages) page.postMessage({ type: "offline", ...msg, reload: fromCopy.has(page.id) && !!msg.updated });
}

// ------------------------------------------------------------------ copying the build

function sync() {
  syncing ||= (async () => {
    let m;
    try {
      m = await refreshManifest();
    } catch (e) {                               // offline: the copy there is, if any
      await loadCurrent();
      await broadcast(current ? { state: "ready", offline: true } : { state: "failed", message: "the network is unreachable" });
      return;
    }
    await loadCurrent();
    if (current && current.hash === m.hash) {
      await broadcast({ state: "ready" });
      return;
    }
    await copyBuild(m);
  })().catch(async (e) => {
    console.warn(`the guide was not saved for offline reading: ${e.message}`);
    // a copy saved before still reads offline; the next page opened online tries again
    await broadcast(current ? { state: "ready", stale: true } : { state: "failed", message: e.message });
  }).finally(() => { syncing = null; });
  return syncing;
}

const fileURL = (path) => ROOT + path.split("/").map(encodeURIComponent).join("/");

// A file of the build from the network, as a response to store, checked against its sha256
// (and its size, when given) as `source` lists them.
async function fetchChecked(path, digest, size = null, source = "MANIFEST.json (a newer build is being deployed?)") {
  const r = await fetch(fileURL(path), { cache: "no-cache", priority: "low" });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  const body = await r.arrayBuffer();
  if ((size !== null && body.byteLength !== size) || (await sha256(body)) !== digest) {
    throw new Error(`${path} differs from ${source}`);
  }
  return new Response(body, { headers: { "Content-Type": r.headers.get("Content-Type") || "application/octet-stream" } });
}

// The cache INSTALL_SCRIPTS are kept in, named by the list (so by their sha256).
let scriptsCacheName = null;
function scriptsCache() {
  scriptsCacheName ||= sha256(new TextEncoder().encode(JSON.stringify(INSTALL_SCRIPTS)))
    .then((h) => SCRIPTS_PREFIX + h.slice(0, 20));
  return scriptsCacheName;
}

// At install: each of INSTALL_SCRIPTS from the network (the HTTP cache, after a page loaded
// them), checked against its sha256, into their cache.
async function storeScripts() {
  const cache = await open(await scriptsCache());
  for (const [path, digest] of Object.entries(INSTALL_SCRIPTS)) {
    const response = await fetchChecked(path, digest, null, "the list this worker was built with");
    await storage("cache.put", () => cache.put(fileURL(path), response));
  }
}

// One of INSTALL_SCRIPTS from their cache, when it is the file the newest build has (its
// manifest, else the offline copy's, else this worker's list); null otherwise.
async function fromScripts(path) {
  const digest = INSTALL_SCRIPTS[path];
  if (!digest) return null;
  const m = await newestManifest();
  const wanted = m ? m.files[path] : current && current.files[path];
  if (wanted && wanted[1] !== digest) return null;
  try {
    const cacheName = await scriptsCache();     // (caches.open would make the cache if it is gone)
    return (await storage("caches.match", () => caches.match(fileURL(path), { cacheName }))) || null;
  } catch (e) {
    return null;
  }
}

async function copyBuild(m) {
  const name = PREFIX + m.hash;
  const cache = await open(name);
  const previous = current;
  const old = previous ? await open(previous.name).catch(() => null) : null;
  const todo = offlineFiles(m.files);
  const totalBytes = todo.reduce((s, p) => s + m.files[p][0], 0);
  let done = 0;
  let bytes = 0;
  let said = 0;
  let copying = 0;              // files being fetched and stored now
  let paused = false;           // told the pages that the copy waits for their reader
  const tell = (force) => {
    if (!force && Date.now() - said < 250) return;
    said = Date.now();
    broadcast({ state: "saving", done, total: todo.length, bytes, totalBytes, paused });
  };
  tell(true);

  async function copyOne(path) {
    const [size, digest] = m.files[path];
    const url = fileURL(path);
    copying += 1;
    try {
      if (!(await storage("cache.match", () => cache.match(url)))) {      // not kept from an interrupted copy
        let response = null;
        if (old && previous.files[path] && previous.files[path][1] === digest) {
          response = await storage("cache.match", () => old.match(url)).catch(() => null);
        }
        response ||= await fetchChecked(path, digest, size);
        await storage("cache.put", () => cache.put(url, response));
      }
    } finally {
      copying -= 1;
    }
    done += 1;
    bytes += size;
    tell(false);
  }

  // Before each file, the copy waits until no page has said for QUIET_MS that its reader
  // changed a figure (offline.js): their recomputation comes first. Once no file is in
  // flight, the pages are told the copy is paused (with its progress then), and again when
  // it goes on.
  const readerPause = async () => {
    for (let left; (left = readerAt + QUIET_MS - Date.now()) > 0;) {
      if (!copying && !paused) {
        paused = true;
        tell(true);
      }
      await new Promise((r) => setTimeout(r, left));
    }
    if (paused) {
      paused = false;
      tell(true);
    }
  };
  const queue = [...todo];
  await Promise.all(Array.from({ length: PARALLEL }, async () => {
    while (queue.length) {
      await readerPause();
      if (queue.length) await copyOne(queue.shift());
    }
  }));
  // complete: the manifest goes in last
  await storage("cache.put", () => cache.put(ROOT + MANIFEST, new Response(m.text, { headers: { "Content-Type": "application/json" } })));
  current = { name, hash: m.hash, files: m.files };
  for (const other of await storage("caches.keys", () => caches.keys())) {
    if (other.startsWith(PREFIX) && other !== name) await storage("caches.delete", () => caches.delete(other)).catch(() => {});
  }
  await broadcast({ state: "ready", done, total: todo.length, bytes, totalBytes, updated: !!previous,
                   compile: RUNTIME_MODULES.filter((p) => p in m.files) });
  fromCopy.clear();
}

// ------------------------------------------------------------------ answering requests

async function fromCache(path) {
  if (!current) return null;
  const url = fileURL(path);
  try {
    const cache = await open(current.name);
    return (await storage("cache.match", () => cache.match(url))) || null;
  } catch (e) {
    return null;
  }
}

async function networkFirst(event, path) {
  if (event.request.mode === "navigate") refreshManifest().catch(() => {});
  try {
    return await fetch(event.request);
  } catch (e) {
    await limit(loadCurrent(), STORAGE_MS * 2, "offline copy").catch(() => null);
    const copy = await fromCache(path);
    if (!copy) throw e;
    if (event.resultingClientId) fromCopy.add(event.resultingClientId);
    return copy;
  }
}

async function copyFirst(event, path) {
  await limit(loadCurrent(), STORAGE_MS * 2, "offline copy").catch(() => null);
  const script = await fromScripts(path);
  if (script) return script;
  if (current && current.files[path]) {
    const m = await newestManifest();
    const wanted = m ? m.files[path] : current.files[path];
    if (wanted && wanted[1] === current.files[path][1]) {
      const copy = await fromCache(path);
      if (copy) return copy;
    }
  }
  try {
    return await fetch(event.request);
  } catch (e) {
    const copy = await fromCache(path);
    if (!copy) throw e;
    return copy;
  }
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || request.headers.has("range") || !request.url.startsWith(ROOT)) return;
  const url = new URL(request.url);
  let path;
  try {
    path = decodeURIComponent(url.pathname.slice(new URL(ROOT).pathname.length));
  } catch (e) {
    return;
  }
  if (path === "" || path.endsWith("/")) path += "index.html";
  if (toNetwork(path, url)) return;
  const page = request.mode === "navigate" || path.endsWith(".html") || path === MANIFEST;
  event.respondWith(page ? networkFirst(event, path) : copyFirst(event, path));
});

self.addEventListener("message", (event) => {
  if (event.data && event.data.type === "sync") event.waitUntil(sync());
  else if (event.data && event.data.type === "reader") readerAt = Date.now();
});

self.addEventListener("install", (event) => {
  self.skipWaiting();
  event.waitUntil(limit(storeScripts(), INSTALL_MS, "storing the pages' scripts")
    .catch((e) => console.warn(`the pages' scripts were not stored at install: ${e.message}`)));
});
self.addEventListener("activate", (event) => event.waitUntil((async () => {
  await self.clients.claim();
  // the scripts of an older list
  const keep = await scriptsCache();
  const names = await storage("caches.keys", () => caches.keys()).catch(() => []);
  for (const name of names) {
    if (name.startsWith(SCRIPTS_PREFIX) && name !== keep) await storage("caches.delete", () => caches.delete(name)).catch(() => {});
  }
})()));
