// The memory snapshot's contract between the build (builder/snapshot.mjs, in Node) and
// the page's worker (static/worker.js): the file format of the installed packages, the
// JS functions a snapshot may refer to, and replaying numpy's shared libraries.
//
// A snapshot is Pyodide's wasm memory after the guide's packages were installed and
// everything the figures need was imported. Three things live outside that memory and
// are put back before it is restored: the installed files (Emscripten's in-memory file
// system), the shared libraries' code and function-table entries, and the JS objects
// Python held references to (Pyodide records those by their path from globalThis; the
// few that have none are listed in KNOWN_FUNCTIONS).

// JS functions that Python code makes at import time and keeps. The snapshot stores their
// name; the worker puts back its own copy (no eval). Panel 1.10 makes this one in
// panel/io/pyodide.py (`_dict_converter`, undefined -> null, then Object.fromEntries); the
// build checks the source is still the same and fails loudly if not.
export const KNOWN_FUNCTIONS = {
  panel_dict_converter: {
    source: `((entries) => {
  for (let entry of entries) {
    if (entry[1] === undefined) {
      entry[1] = null;
    }
  }
  return Object.fromEntries(entries);
})`,
    fn: (entries) => {
      for (const entry of entries) {
        if (entry[1] === undefined) entry[1] = null;
      }
      return Object.fromEntries(entries);
    },
  },
};

const squash = (s) => s.replace(/\s+/g, "");

// Build side: a name for a function Python holds, or an error naming it.
export function serializer(obj) {
  if (typeof obj === "function") {
    const src = squash(String(obj));
    for (const [name, known] of Object.entries(KNOWN_FUNCTIONS)) {
      if (squash(known.source).replace(/^\((.*)\)$/, "$1") === src.replace(/^\((.*)\)$/, "$1")) return { known: name };
    }
  }
  throw new Error(`the snapshot cannot hold this JS object (not reachable from globalThis, not in KNOWN_FUNCTIONS): ${String(obj).slice(0, 120)}`);
}

// Worker side.
export function deserializer(s) {
  const known = s && KNOWN_FUNCTIONS[s.known];
  if (!known) throw new Error(`unknown object in the snapshot: ${JSON.stringify(s).slice(0, 80)}`);
  return known.fn;
}

// How the snapshot's two files begin (checked before either is used): Pyodide's snapshot
// header, and the installed files packed: the 8 bytes of FILES_MAGIC, a u32 (little-endian)
// length of a JSON index [[path, size], ...], the index, then the files' bytes in index order.
export const SNAPSHOT_MAGIC = new Uint8Array([0x00, 0x73, 0x6e, 0x70]);
export const FILES_MAGIC = new TextEncoder().encode("GUIDEFS1");
export const startsWith = (bytes, head) => bytes.length >= head.length && head.every((b, i) => bytes[i] === b);

export function packFiles(entries) {
  const index = entries.map(([p, data]) => [p, data.length]);
  const json = new TextEncoder().encode(JSON.stringify(index));
  const head = FILES_MAGIC.length + 4;
  const out = new Uint8Array(head + json.length + entries.reduce((a, [, d]) => a + d.length, 0));
  out.set(FILES_MAGIC, 0);
  new DataView(out.buffer).setUint32(FILES_MAGIC.length, json.length, true);
  out.set(json, head);
  let off = head + json.length;
  for (const [, d] of entries) { out.set(d, off); off += d.length; }
  return out;
}

export function unpackFiles(u8) {
  if (!startsWith(u8, FILES_MAGIC)) throw new Error("installed files: not a file pack");
  const head = FILES_MAGIC.length + 4;
  const n = new DataView(u8.buffer, u8.byteOffset, u8.byteLength).getUint32(FILES_MAGIC.length, true);
  const index = JSON.parse(new TextDecoder().decode(u8.subarray(head, head + n)));
  let off = head + n;
  const files = index.map(([p, size]) => { const d = u8.subarray(off, off + size); off += size; return [p, d]; });
  if (off !== u8.length) throw new Error(`installed files: ${u8.length - off} bytes unaccounted for`);
  return files;
}

export function writeFiles(M, files) {
  const made = new Set();
  for (const [p, data] of files) {
    const dir = p.slice(0, p.lastIndexOf("/"));
    if (!made.has(dir)) { M.FS.mkdirTree(dir); made.add(dir); }
    M.FS.writeFile(p, data, { canOwn: true });
  }
}

// Emscripten's `struct dso` (dynlink): flags at +8, mem_addr +12, mem_size +16,
// table_addr +20, table_size +24. The build records where each library landed; the worker
// loads the same libraries, in the same order, into handles that say "already placed
// there", so their code and table entries land exactly where the snapshot expects them.
export const DSO = { size: 64, loaded: 8, memAddr: 12, memSize: 16, tableAddr: 20, tableSize: 24 };

export function readDso(M, handle) {
  return { memoryBase: M.HEAPU32[(handle + DSO.memAddr) >> 2], memorySize: M.HEAP32[(handle + DSO.memSize) >> 2],
           tableBase: M.HEAPU32[(handle + DSO.tableAddr) >> 2], tableSize: M.HEAP32[(handle + DSO.tableSize) >> 2] };
}

export async function replayDsos(M, meta) {
  for (const d of meta.dsos) {
    const h = d.handle;
    M.HEAPU8.fill(0, h, h + DSO.size);
    M.HEAP8[h + DSO.loaded] = 1;
    M.HEAPU32[(h + DSO.memAddr) >> 2] = d.memoryBase;
    M.HEAP32[(h + DSO.memSize) >> 2] = d.memorySize;
    M.HEAPU32[(h + DSO.tableAddr) >> 2] = d.tableBase;
    M.HEAP32[(h + DSO.tableSize) >> 2] = d.tableSize;
    const fs = { findObject: (p) => M.FS.findObject(p), readFile: (p) => M.FS.readFile(p) };
    await M.loadDynamicLibrary(d.name, { loadAsync: true, nodelete: true, allowUndefined: true, global: d.global, fs },
                               d.global ? null : {}, h);
    const base = d.name.slice(d.name.lastIndexOf("/") + 1);
    if (!M.LDSO.loadedLibsByName[base]) M.LDSO.loadedLibsByName[base] = M.LDSO.loadedLibsByName[d.name];
  }
  // the dlopen handles Python holds for these libraries
  for (const [h, name] of meta.handles) {
    const dso = M.LDSO.loadedLibsByName[name];
    if (!dso) throw new Error(`shared library ${name} was not replayed`);
    M.LDSO.loadedLibsByHandle[h] = dso;
  }
  if (M.wasmTable.length !== meta.tableAtSnap) {
    throw new Error(`function table has ${M.wasmTable.length} entries after the shared libraries, the snapshot ${meta.tableAtSnap}`);
  }
}

// The build id Pyodide wrote into a snapshot's header (Pyodide 0.27: 8 u32 words from
// byte 16, each 8 hex digits of BUILD_ID), to reject a snapshot of another runtime build
// before booting it.
export function snapshotBuildId(u8) {
  const words = new DataView(u8.buffer, u8.byteOffset, 48);
  let s = "";
  for (let i = 0; i < 8; i++) s += words.getUint32(16 + 4 * i, true).toString(16).padStart(8, "0");
  return s;
}
