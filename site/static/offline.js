// Offline reading: registers the guide's service worker (sw.js at the site's root) once the
// page's figures are live (or have failed), when the browser is idle and the reader has
// left the figures alone a moment (guide.js whenQuiet), so saving the guide never competes
// with the first load or with a reader's first changes; then shows what the worker reports
// in a small note ("Saving the guide for offline reading: 40%", "Available offline", "A
// newer version of the guide is available: reload"). Where service workers are unavailable
// (a page opened from file://, an insecure origin, a browser without them) it does nothing.
(function () {
  "use strict";
  var sw = navigator.serviceWorker;
  var root = new URL("../", document.currentScript.src).href;   // this file is static/offline.js
  if (!sw || !/^https?:$/.test(location.protocol) || !location.href.startsWith(root)) return;
  var WAIT_MS = 60000;   // register at the latest this long after the page loaded

  var note = null;
  function say(state, text) {
    if (!note) {
      note = document.createElement("p");
      note.className = "offline-note";
      note.setAttribute("role", "status");
      (document.querySelector("header.top") || document.querySelector("main") || document.body).append(note);
    }
    note.dataset.offline = state;
    note.textContent = text;
  }
  var MB = function (n) { return (n / 1e6).toFixed(1); };

  // fn once the reader has not changed a figure for a moment (guide.js); at once on a page
  // whose figure script did not run
  function quiet(fn) {
    var G = window.__guide;
    if (G && G.whenQuiet) G.whenQuiet(fn); else fn();
  }

  sw.addEventListener("message", function (event) {
    var m = event.data;
    if (!m || m.type !== "offline") return;
    document.documentElement.dataset.offline = m.state;
    if (m.state === "saving") {
      var pct = m.totalBytes ? Math.floor((100 * m.bytes) / m.totalBytes) : 0;
      say("saving", "Saving the guide for offline reading: " + pct + "% (" + MB(m.bytes) + " of " + MB(m.totalBytes) + " MB)" +
          (m.paused ? ", paused while you move the figures." : "."));
    } else if (m.state === "ready" && m.reload) {
      say("reload", "");
      note.append("A newer version of the guide is available: ");
      var a = document.createElement("a");
      a.href = location.href;
      a.textContent = "reload";
      a.addEventListener("click", function (e) { e.preventDefault(); location.reload(); });
      note.append(a, ".");
    } else if (m.state === "ready" && m.offline) {
      say("ready", "Available offline: you are reading the saved copy.");
    } else if (m.state === "ready") {
      say("ready", "Available offline: every chapter and its live figures open without a network.");
      if (m.compile && m.compile.length) {
        document.documentElement.dataset.compiled = "running";
        quiet(function () { compileSaved(m.compile); });
      }
    } else if (m.state === "failed") {
      say("failed", "Not saved for offline reading (" + m.message + ").");
    }
  });

  // The runtime's big module scripts (sw.js RUNTIME_MODULES), run once more in a worker of
  // their own, and the page's classic scripts (BokehJS, Panel's bundle) once more in a hidden
  // frame, after a copy is saved: Chrome keeps the code it compiled for a script beside its
  // HTTP cache entry from the script's second load on, so the next page runs them from it.
  // Each of the two waits for the reader to leave the figures alone (the frame runs its
  // scripts on the page's own thread). data-compiled on <html> says how it goes ("running",
  // from the message that the copy is saved, then "done" or "failed").
  function compileSaved(paths) {
    var el = document.documentElement;
    var w;
    try {
      w = new Worker(root + "static/compile.js", { type: "module" });
    } catch (e) {
      el.dataset.compiled = "failed";
      return;
    }
    var fail = function () { finish("failed"); };
    var timer = setTimeout(fail, 30000);    // for each of the two
    var frame = null;
    function finish(state) {
      clearTimeout(timer);
      w.terminate();
      if (frame) frame.remove();
      el.dataset.compiled = state;
    }
    function runScripts() {
      var scripts = (window.__guide && window.__guide.scripts) || [];
      if (!scripts.length) return finish("done");
      frame = document.createElement("iframe");
      frame.hidden = true;
      frame.srcdoc = scripts.map(function (s) {
        return '<script src="' + new URL(s, document.baseURI).href + '"></scr' + 'ipt>';
      }).join("");
      frame.onload = function () { finish("done"); };   // (after its scripts ran)
      document.body.append(frame);
    }
    w.onmessage = function (e) {
      w.terminate();                        // its module ran: the frame needs none of it
      if (!(e.data && e.data.ok)) return finish("failed");
      clearTimeout(timer);
      quiet(function () {
        timer = setTimeout(fail, 30000);
        runScripts();
      });
    };
    w.onerror = function () { finish("failed"); };
    w.postMessage({ urls: paths.map(function (p) { return root + p; }) });
  }

  // While a copy is being saved, it pauses for the reader's changes (sw.js, "reader"): each is
  // told to the worker that controls the page, at most every TELL_MS.
  var TELL_MS = 250;
  var told = 0;
  function tellReaderChange() {
    var now = Date.now();
    if (!sw.controller || document.documentElement.dataset.offline !== "saving" || now - told < TELL_MS) return;
    told = now;
    sw.controller.postMessage({ type: "reader" });
  }

  function register() {
    if (window.__guide && window.__guide.onReaderChange) window.__guide.onReaderChange(tellReaderChange);
    // A newer worker that installs meanwhile replaces the one asked below, which may then
    // stop before it answers: ask the one that takes the page over as well.
    sw.addEventListener("controllerchange", function () {
      if (sw.controller) sw.controller.postMessage({ type: "sync" });
    });
    sw.register(root + "sw.js", { scope: root }).then(function () {
      return sw.ready;
    }).then(function (reg) {
      reg.active.postMessage({ type: "sync" });
    }).catch(function (e) {
      console.info("offline reading unavailable: " + e);
    });
  }

  function whenIdle() {
    var go = function () { quiet(register); };
    if (window.requestIdleCallback) requestIdleCallback(go, { timeout: 5000 });
    else setTimeout(go, 1000);
  }

  // Wait until every figure is live or has failed (a page without figures: its load).
  var started = false;
  function start() {
    if (started) return;
    started = true;
    observer.disconnect();
    whenIdle();
  }
  function settled() {
    var figs = document.querySelectorAll("[data-figure]");
    for (var i = 0; i < figs.length; i++) {
      var s = figs[i].dataset.state;
      if (s !== "live" && s !== "error") return false;
    }
    return document.readyState === "complete";
  }
  var observer = new MutationObserver(function () { if (settled()) start(); });
  observer.observe(document.documentElement, { subtree: true, attributes: true, attributeFilter: ["data-state"] });
  window.addEventListener("load", function () {
    if (settled()) start();
    setTimeout(start, WAIT_MS);
  });
})();
