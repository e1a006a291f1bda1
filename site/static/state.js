// A figure's controls in the page's address: reading a link's values, writing the
// current state as a link or an <iframe> embed code.
//
// Scheme (docs/using-figures.md, "Sharing a figure"):
//   figure-<id>.html?batch=64&gpu=H200          a figure page: plain control keys
//   <chapter>.html?<id>.batch=64#fig-<id>       a chapter page: keys prefixed by figure id
//   figure-<id>.html?embed=1&batch=64           embed mode: the figure alone, for an iframe
// A value is the slider's number, the option's value (true/false for booleans) or
// true/false for a checkbox. Values are checked against the control (its range, step and
// options); what does not fit is ignored and said under the figure. A key given twice:
// the last one wins. The static preview shows the defaults; the live figure opens at the
// link's values, set in the figure's order of controls.
//
// Each figure carries its controls' description (builder/prerender.py url_controls) in
// <script class="fig-controls">.

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,3})?$/;
const RESERVED = ["embed", "boot"];   // page options, not figure settings (boot=normal: no memory snapshot)

const show = (raw) => {
  const s = JSON.stringify(String(raw));
  return s.length > 42 ? s.slice(0, 40) + "\u2026\"" : s;
};

// ------------------------------------------------------------------ values

function parseValue(spec, raw) {
  // -> {value} or {error}; never throws, never evaluates anything
  if (spec.kind === "number") {
    if (!NUMBER.test(raw)) return { error: "not a number" };
    const v = Number(raw);
    if (!Number.isFinite(v) || v < spec.start - 1e-9 * Math.abs(spec.step) || v > spec.end + 1e-9 * Math.abs(spec.step)) {
      return { error: `outside ${spec.start} to ${spec.end}` };
    }
    if (spec.integer && !Number.isInteger(v)) return { error: "not a whole number" };
    const k = (v - spec.start) / spec.step;
    if (Math.abs(k - Math.round(k)) > 1e-6) return { error: `not on the steps of ${spec.step} from ${spec.start}` };
    return { value: v };
  }
  if (spec.kind === "bool") {
    if (raw === "true" || raw === "false") return { value: raw === "true" };
    return { error: "not true or false" };
  }
  if (spec.kind === "choice") {
    if (spec.tokens.indexOf(raw) >= 0) return { value: raw };
    const some = spec.tokens.slice(0, 6).join(", ") + (spec.tokens.length > 6 ? ", \u2026" : "");
    return { error: `not one of ${some}` };
  }
  return { error: "cannot be set from a link" };
}

const same = (spec, a, b) => (spec.kind === "number" ? Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b)) : a === b);
const written = (v) => String(v);   // numbers as JS prints them (shortest round trip), tokens, true/false

// ------------------------------------------------------------------ Bokeh models

function controlModel(root, key) {
  // The model holding control `key`'s value (the inner one of a composite control).
  if (!root) return null;
  const m = [root, ...root.references()].find((m) => (m.css_classes || []).includes(`ctl-${key}`));
  if (!m) return null;
  const holds = (x) => ["value", "active"].some((a) => a in x.properties);
  return holds(m) ? m : [...m.references()].find(holds) || m;
}

const optionValue = (o) => (Array.isArray(o) ? o[0] : o);

function readControl(root, key, spec) {
  const m = controlModel(root, key);
  if (!m) return undefined;
  if (spec.kind === "number") return m.value;
  if (spec.kind === "bool") return "active" in m.properties ? m.active : m.value;
  if ("options" in m.properties) {                       // a menu: its option values
    const i = m.options.map(optionValue).indexOf(m.value);
    return spec.tokens[i];
  }
  if ("active" in m.properties) return spec.tokens[m.active];   // a button group: the index
  return spec.tokens[m.value];                           // a discrete slider: the index
}

function writeControl(root, key, spec, value) {
  // Set the live model; returns an error text when the model does not take the value.
  const m = controlModel(root, key);
  if (!m) return "not in the live figure";
  if (spec.kind === "number") {
    const step = m.step ?? spec.step;
    if (value < m.start - 1e-9 * step || value > m.end + 1e-9 * step) return `outside ${m.start} to ${m.end}`;
    m.value = value;
    if ("value_throttled" in m.properties) m.value_throttled = value;
    return null;
  }
  if (spec.kind === "bool") {
    if ("active" in m.properties) m.active = value; else m.value = value;
    return null;
  }
  const i = spec.tokens.indexOf(value);
  if ("options" in m.properties) {
    if (m.options.length !== spec.tokens.length) return "its options differ from the page's";
    m.value = optionValue(m.options[i]);
  } else if ("active" in m.properties) {
    m.active = i;
  } else {
    m.value = i;
    if ("value_throttled" in m.properties) m.value_throttled = i;
  }
  return null;
}

// ------------------------------------------------------------------ the page's link

function specOf(fig) {
  if (!fig.spec) {
    const el = fig.el.querySelector("script.fig-controls");
    let spec = {};
    try { spec = el ? JSON.parse(el.textContent) : {}; } catch { spec = {}; }
    fig.spec = new Map(Object.entries(spec));
  }
  return fig.spec;
}

export function readLink(figs, search = location.search) {
  // Each figure's values from the address: fig.linked (Map key -> value), fig.notes.
  const single = figs.size === 1 && document.body.classList.contains("figure-page");
  const ids = [...figs.keys()];
  const given = new Map(ids.map((id) => [id, new Map()]));
  for (const fig of figs.values()) fig.notes = [];
  const first = figs.values().next().value;
  let params;
  try { params = new URLSearchParams(search); } catch { return; }
  for (const [name, raw] of params) {
    if (RESERVED.includes(name)) continue;
    let id = ids.find((i) => name.startsWith(`${i}.`));
    let key = id ? name.slice(id.length + 1) : name;
    if (!id && single) id = ids[0];
    if (!id) {
      if (first) first.notes.push(`${show(name)} names no figure on this page`);
      continue;
    }
    const fig = figs.get(id);
    const spec = specOf(fig);
    if (!spec.has(key)) {
      fig.notes.push(`${show(key)} is not a control of this figure (it has ${[...spec.keys()].join(", ") || "none"})`);
      continue;
    }
    const seen = given.get(id);
    if (!seen.has(key)) seen.set(key, []);
    seen.get(key).push(raw);
  }
  for (const [id, seen] of given) {
    const fig = figs.get(id);
    const spec = specOf(fig);
    fig.linked = new Map();
    for (const [key, raws] of seen) {
      if (raws.length > 1) fig.notes.push(`${key} is given ${raws.length} times; the last one is used`);
      const raw = raws[raws.length - 1];
      const r = parseValue(spec.get(key), raw);
      if ("error" in r) fig.notes.push(`${key}=${show(raw)}: ${r.error}; the default is kept`);
      else fig.linked.set(key, r.value);
    }
    showNotes(fig);
  }
}

export function statusBox(fig, tag, className, role) {
  // A message box under the figure's status line (made once), e.g. its error or notes.
  let box = fig.el.querySelector(`.${className}`);
  if (!box) {
    box = document.createElement(tag);
    box.className = className;
    box.setAttribute("role", role);
    fig.el.querySelector(".fig-status").after(box);
  }
  return box;
}

function showNotes(fig) {
  if (!fig.notes.length) return;
  statusBox(fig, "p", "fig-url-note", "note").textContent = `Ignored in this page's address: ${fig.notes.join("; ")}.`;
}

export function linkPhrase(fig) {
  // "opens at batch 64, gpu H200 once live" while the preview shows the defaults
  if (!fig.linked || !fig.linked.size) return "";
  const parts = [...fig.linked].map(([k, v]) => `${k} ${written(v)}`);
  return `Opens at ${parts.join(", ")} once live.`;
}

export async function applyLink(fig, liveRoot, skip, pythonIdle) {
  // The link's values onto the live figure's controls (not those the reader already moved
  // on the preview), one at a time in the figure's order of controls, each once Python has
  // handled the one before (a control may set others, as a preset sets lengths); a value
  // the live model refuses is noted and left at its default. -> how many were set.
  const linked = fig.linked || new Map();
  fig.linked = new Map();
  let n = 0;
  for (const [key, spec] of specOf(fig)) {
    if (!linked.has(key) || skip.has(`ctl-${key}`)) continue;
    await pythonIdle();
    const error = writeControl(liveRoot, key, spec, linked.get(key));
    if (error) fig.notes.push(`${key}=${show(written(linked.get(key)))}: ${error}; the default is kept`);
    else n += 1;
  }
  await pythonIdle();
  showNotes(fig);
  return n;
}

// Controls the figure's Python set itself (a preset setting lengths): a link writes them
// even when they are back at their default, since the control that set them comes first.
const CONTROL_MODELS = new Map();   // live model id -> [fig, key]

export function watchControls(fig, liveRoot) {
  fig.setByFigure = new Set();
  for (const key of specOf(fig).keys()) {
    const m = controlModel(liveRoot, key);
    if (m) CONTROL_MODELS.set(m.id, [fig, key]);
  }
}

export function noteChangeFromPython(event) {
  const hit = event.model && ["value", "active"].includes(event.attr) && CONTROL_MODELS.get(event.model.id);
  if (hit) hit[0].setByFigure.add(hit[1]);
}

// ------------------------------------------------------------------ writing links

export function linkValue(fig, key) {
  // Control `key`'s value on the live figure, as a link writes it (a menu's token, a number,
  // true/false); undefined for a key the figure's link does not carry.
  const spec = specOf(fig).get(key);
  return spec ? readControl(fig.liveRoot, key, spec) : undefined;
}

function currentValues(fig) {
  // The figure's current values: the live figure's, or before that the preview's changes
  // over the link's values.
  const spec = specOf(fig);
  const out = new Map();
  for (const [key, s] of spec) {
    let v = fig.live ? readControl(fig.liveRoot, key, s) : undefined;
    if (!fig.live) {
      const preview = readControl(fig.staticRoot, key, s);
      v = preview !== undefined && !same(s, preview, s.default) ? preview : fig.linked?.get(key);
    }
    if (v !== undefined && (!same(s, v, s.default) || fig.setByFigure?.has(key))) out.set(key, v);
  }
  return out;
}

export function figureLink(fig, { embed = false, chapter = null } = {}) {
  // This figure's state as a URL: its own page (optionally in embed mode) or, with
  // `chapter`, that chapter page's anchor with figure-prefixed keys.
  const id = fig.el.dataset.figure;
  const url = new URL(chapter || `figure-${id}.html`, location.href);
  const params = new URLSearchParams();
  if (embed) params.set("embed", "1");
  for (const [k, v] of currentValues(fig)) params.append(chapter ? `${id}.${k}` : k, written(v));
  url.search = params.toString();
  url.hash = chapter ? `fig-${id}` : "";
  return url.href;
}

function embedSize(fig) {
  // The figure's laid-out size (the live figure's, else the preview's or poster's), plus
  // the embed page's status line, title and link back to the guide.
  const frame = fig.el.querySelector(".fig-frame");
  const width = Math.ceil(Math.max(frame.scrollWidth, frame.getBoundingClientRect().width)) + 24;
  const height = Math.ceil(Math.max(frame.scrollHeight, frame.getBoundingClientRect().height)) + 120;
  return [width, height];
}

function embedCode(fig) {
  const [w, h] = embedSize(fig);
  const title = fig.el.querySelector("figcaption")?.textContent.trim().replace(/\s+/g, " ") || fig.el.dataset.figure;
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
  return `<iframe src="${esc(figureLink(fig, { embed: true }))}" width="${w}" height="${h}" title="${esc(title)}" style="border:0" loading="lazy"></iframe>`;
}

async function copy(fig, text, what) {
  // The clipboard where the browser allows it; otherwise the text, selected, in a box.
  const box = fig.el.querySelector(".fig-share-text");
  const said = fig.el.querySelector(".fig-share-said");
  box.value = text;
  box.hidden = false;
  try {
    if (!navigator.clipboard || !window.isSecureContext) throw new Error("no clipboard");
    // a browser that neither grants nor refuses (a pending permission) gets the box too
    const late = new Promise((_, reject) => setTimeout(() => reject(new Error("no answer")), 1500));
    await Promise.race([navigator.clipboard.writeText(text), late]);
    said.textContent = `${what} copied.`;
  } catch {
    box.focus();
    box.select();
    said.textContent = `Copy the ${what.toLowerCase()} below (Ctrl+C or \u2318C).`;
  }
}

export function initSharing(figs) {
  const chapter = document.body.classList.contains("chapter-page") ? location.pathname.split("/").pop() : null;
  for (const fig of figs.values()) {
    const share = fig.el.querySelector(".fig-share");
    if (!share) continue;
    share.querySelector(".fig-copy-link").addEventListener("click", () => copy(fig, figureLink(fig, { chapter }), "Link"));
    share.querySelector(".fig-copy-embed").addEventListener("click", () => copy(fig, embedCode(fig), "Embed code"));
    share.hidden = false;
  }
  // embed mode: the way back to the guide carries the figure's state
  const back = document.querySelector("a.embed-back");
  const only = figs.values().next().value;
  if (back && only) {
    const update = () => { back.href = figureLink(only, { chapter: back.dataset.chapter }); };
    back.addEventListener("pointerdown", update);
    back.addEventListener("focus", update);
    back.addEventListener("click", update);
  }
}
