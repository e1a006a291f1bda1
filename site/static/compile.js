// Imports each module it is sent, once, and says whether all loaded (static/offline.js).
// Chrome keeps the compiled code of a module run from Cache Storage beside its entry there,
// so the page workers that import it next start from that code (sw.js RUNTIME_MODULES).
self.onmessage = async (event) => {
  try {
    for (const url of event.data.urls) await import(url);
    self.postMessage({ ok: true });
  } catch (e) {
    self.postMessage({ ok: false, message: String(e) });
  }
};
