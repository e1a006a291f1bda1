// search.html: finds the chapters' sections that hold every word typed, in the index the
// build wrote (search.json: url, chapter, title, section, text per section; builder/search.py).
// Nothing leaves the browser; offline, search.json comes from the guide's offline copy.
(function () {
  const form = document.querySelector(".search-form");
  const input = document.getElementById("search-q");
  const said = document.querySelector(".search-said");
  const list = document.querySelector(".search-results");
  let index = null;
  const load = () => (index ??= fetch("search.json").then((r) => {
    if (!r.ok) throw new Error(`search.json: HTTP ${r.status}`);
    return r.json();
  }));
  const words = (q) => q.toLowerCase().split(/\s+/).filter(Boolean);

  // every word in the section's heading or text; heading hits first, then more hits
  function find(entries, q) {
    const ws = words(q);
    if (!ws.length) return [];
    const hits = [];
    for (const e of entries) {
      const head = `${e.title} ${e.section}`.toLowerCase();
      const text = e.text.toLowerCase();
      if (!ws.every((w) => head.includes(w) || text.includes(w))) continue;
      const score = ws.reduce((s, w) => s + (head.includes(w) ? 100 : 0) + text.split(w).length - 1, 0);
      hits.push([score, e]);
    }
    return hits.sort((a, b) => b[0] - a[0] || a[1].chapter - b[1].chapter).map((h) => h[1]);
  }

  function snippet(text, q) {
    const low = text.toLowerCase();
    const at = Math.max(0, ...words(q).map((w) => low.indexOf(w)).filter((i) => i >= 0).slice(0, 1));
    const start = Math.max(0, at - 80);
    return (start ? "… " : "") + text.slice(start, start + 220) + (start + 220 < text.length ? " …" : "");
  }

  async function search(q) {
    list.replaceChildren();
    if (!words(q).length) { said.textContent = ""; return; }
    let found;
    try {
      found = find(await load(), q);
    } catch (e) {
      said.textContent = `The search index could not be read (${e.message}).`;
      return;
    }
    said.textContent = found.length ? `${found.length} section${found.length > 1 ? "s" : ""} found for “${q}”.`
                                    : `Nothing found for “${q}”: try fewer or other words, or the glossary.`;
    for (const e of found.slice(0, 50)) {
      const li = document.createElement("li");
      const a = document.createElement("a");
      a.href = e.url;
      a.textContent = `${e.chapter}. ${e.title}${e.section ? ": " + e.section : ""}`;
      const p = document.createElement("p");
      p.textContent = snippet(e.text, q);
      li.append(a, p);
      list.append(li);
    }
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    history.replaceState(null, "", `?q=${encodeURIComponent(input.value)}`);
    search(input.value);
  });
  const q = new URLSearchParams(location.search).get("q");
  if (q) { input.value = q; search(q); }
})();
