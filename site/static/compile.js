// Imports each module it is sent, once, and says whether all loaded (static/offline.js).
// Chrome keeps the compiled code of a module beside where it came from (online, the HTTP
// cache: sw.js leaves RUNTIME_MODULES to the network), so the page workers that import it
// next start from that code.
self.onmessage = async (event) => {
  try {
    for (const url of event.data.urls) await import(url);
    self.postMessage({ ok: true });
  } catch (e) {
    self.postMessage({ ok: false, message: String(e) });
  }
};
