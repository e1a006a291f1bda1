"""Pictures of the figures for slides and papers: `python build.py --export [--export-dir DIR]`.

For every figure, in its default state and in each named state its module declares
(STATES, see widgets.state):
- <id>[--<state>].png  the whole figure (controls, plots, readouts) at 2x resolution;
- <id>[--<state>].svg  its plots, drawn by Bokeh's SVG backend, placed as in the layout
                       (the controls and readouts are HTML and are in the PNG only);
and once per figure
- figure-<id>.html     a self-contained page of the figure in its default state: BokehJS,
                       Panel's JS and its stylesheets inline, so it opens from a file with no
                       network (its controls show the state; moving them needs a Python kernel:
                       `python -m widgets serve <id>` or a notebook);
plus index.html and index.json listing them, and export-manifest.json, the files the export
wrote: a later export into the same folder replaces or deletes only those (builder.export_folder).

Each figure is built in CPython (widgets.figure), saved as a standalone page, and opened
in the Debian Chromium the browser tests use (through Playwright) with every request
that is not a local file refused; a page that asks for anything else fails the export.
"""
from __future__ import annotations

import base64
import html
import json
import re
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from builder.common import ROOT, BuildError, log
from builder.export_folder import check_target, place, staging_folder
from builder.output import fault_point
from sim.cli import UsageError, signals_held

EXPORTS = ROOT / "_exports"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND"]
SCALE = 2                      # device pixels per CSS pixel in the PNGs
VIEWPORT = {"width": 1600, "height": 1200}
IDLE_JS = "() => window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].is_idle"
# The root's box, and every plot's serialized SVG with its box (relative to the root).
CAPTURE_JS = """(withSvg) => {
  const root = Bokeh.index.roots[0];
  // the figure's box enlarged to whole CSS pixels: a fractional clip (text lines of
  // fractional height) would be cut to whole device pixels in the screenshot
  const r0 = root.el.getBoundingClientRect();
  const left = Math.floor(r0.left), top = Math.floor(r0.top);
  const rb = {x: left, y: top, width: Math.ceil(r0.right) - left, height: Math.ceil(r0.bottom) - top};
  const plots = [];
  function walk(v) {
    if (v.model.type === "Figure" || v.model.type === "Plot") {
      const r = v.el.getBoundingClientRect();
      if (withSvg && r.width > 0 && r.height > 0)
        plots.push({x: r.x - rb.x, y: r.y - rb.y, svg: v.export("svg").ctx.get_serialized_svg(true)});
      return;
    }
    for (const c of (v.children ? v.children() : [])) walk(c);
  }
  walk(root);
  return {x: rb.x + window.scrollX, y: rb.y + window.scrollY, width: rb.width, height: rb.height, plots};
}"""


def inline_panel_css(page: str) -> str:
    """Panel's models name their stylesheets by CDN URL; replace each by a data: URI of the
    same file from the installed panel package, so the page needs no network."""
    import panel
    from panel.io.resources import CDN_DIST

    from widgets.runtime import css_with_data_urls, panel_css_file

    def data_uri(m: re.Match) -> str:
        path = panel_css_file(m.group(0))
        if path is None:
            raise BuildError(f"the exported page names {m.group(0)}, which panel {panel.__version__} does not ship")
        return "data:text/css;base64," + base64.b64encode(css_with_data_urls(path).encode()).decode()

    return re.sub(re.escape(CDN_DIST) + r"([\w./-]+\.css)", data_uri, page)


def save_page(view, path: Path, title: str) -> None:
    """A standalone page of `view` with every resource inline."""
    import panel as pn
    from bokeh.resources import INLINE

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "page.html"
        pn.panel(view.layout).save(raw, resources=INLINE, embed=False, title=title)
        path.write_text(inline_panel_css(raw.read_text()))


def compose_svg(capture: dict) -> str:
    """One SVG document with each plot's SVG placed where the layout put it."""
    w, h = round(capture["width"]), round(capture["height"])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
             f'width="{w}" height="{h}" viewBox="0 0 {w} {h}">', f'<rect width="{w}" height="{h}" fill="white"/>']
    for p in capture["plots"]:
        inner = re.sub(r"^<\?xml[^>]*>\s*", "", p["svg"])
        parts.append(f'<g transform="translate({p["x"]:.2f},{p["y"]:.2f})">{inner}</g>')
    svg = "\n".join(parts) + "\n</svg>\n"
    ET.fromstring(svg)          # well-formed, or the export fails here
    return svg


class Browser:
    """Debian Chromium at 2x device scale, refusing every request that is not a local file."""

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        if not Path(CHROMIUM).is_file():
            raise BuildError(f"--export renders in Chromium, and {CHROMIUM} is missing (./dev test installs "
                             f"Debian's chromium)")
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        self.ctx = self._browser.new_context(device_scale_factor=SCALE, viewport=VIEWPORT)
        self.refused: list[str] = []
        self.ctx.route("**/*", self._route)
        return self

    def _route(self, route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            self.refused.append(route.request.url)
            route.abort()

    def capture(self, page_file: Path, png: Path | None, with_svg: bool) -> dict:
        """Open `page_file`, wait until Bokeh is idle, write the PNG; return the layout's box (and plot SVGs)."""
        page = self.ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(page_file.as_uri())
            page.wait_for_function(IDLE_JS, timeout=60_000)
            page.evaluate("() => document.fonts.ready")
            box = page.evaluate(CAPTURE_JS, with_svg)
            if png is not None:
                page.screenshot(path=str(png), full_page=True,
                                clip={k: box[k] for k in ("x", "y", "width", "height")})
        finally:
            page.close()
        if errors or self.refused:
            raise BuildError(f"{page_file.name}: page errors {errors}, network requests {self.refused}")
        return box

    def __exit__(self, exc_type, exc, tb):
        # after an error or a stop, Chromium or its driver may be gone already (a Ctrl-C
        # reaches them too): closing then must not replace the exception that ended the export
        for close in (self.ctx.close, self._browser.close, self._pw.stop):
            try:
                close()
            except Exception:
                if exc_type is None:
                    raise


def stems(figure_id: str) -> list[tuple[str | None, dict, str]]:
    """(state, its control values, file stem) of each picture of `figure_id`: default first."""
    import widgets

    return [(state, values, figure_id if state is None else f"{figure_id}--{state}")
            for state, values in [(None, {}), *widgets.states(figure_id).items()]]


def planned_files(figure_ids: list[str]) -> set[str]:
    """The names an export of `figure_ids` writes (besides its manifest)."""
    names = {"index.html", "index.json"}
    for fid in figure_ids:
        names.add(f"figure-{fid}.html")
        names.update(f"{stem}{ext}" for _, _, stem in stems(fid) for ext in (".png", ".svg"))
    return names


def export_figures(out: Path = EXPORTS, figure_ids: list[str] | None = None) -> list[dict]:
    """Write the pictures and offline pages of `figure_ids` (default: every figure) into `out`.

    The files are written in a staging folder and moved into `out` when all are done
    (builder.export_folder): an error or a stop before then leaves `out` as it was; an
    earlier export there is recognised by its manifest, and only the files it lists are
    replaced or deleted."""
    import widgets

    t0 = time.perf_counter()
    ids = list(widgets.FIGURES) if figure_ids is None else list(figure_ids)
    try:
        for fid in ids:
            widgets.module(fid)
    except ValueError as e:
        raise UsageError(str(e)) from None
    planned = planned_files(ids)
    check_target(out, planned)
    staging = staging_folder(out)
    done = []
    try:
        entries = write_export(staging, ids)
        fault_point("export-staged")
        place(staging, out, planned, placed=lambda: done.append(True))
    except BaseException as e:
        with signals_held():
            shutil.rmtree(staging, ignore_errors=True)
        e.export_placed = bool(done)     # a stop during the move takes effect once all is in place
        raise
    log(f"exported {len(ids)} figures, {len(entries)} states in {time.perf_counter() - t0:.0f} s", str(out))
    return entries


def write_export(out: Path, ids: list[str]) -> list[dict]:
    """Every file of the export of `ids` into the (staging) folder `out`; the index's entries."""
    import widgets

    entries: list[dict] = []
    with Browser() as browser, tempfile.TemporaryDirectory() as tmp:
        for fid in ids:
            title = widgets.module(fid).TITLE
            page = out / f"figure-{fid}.html"
            save_page(widgets.figure(fid), page, title)
            browser.capture(page, None, with_svg=False)      # renders offline, or fails
            log(f"widgets.{fid}", page.name)
            for state, values, stem in stems(fid):
                view = widgets.figure(fid, state)
                for p in view.plots:           # pictures for print: vector plots, no toolbars
                    p.output_backend, p.toolbar_location = "svg", None
                svg_page = Path(tmp) / f"{stem}.html"
                save_page(view, svg_page, title)
                box = browser.capture(svg_page, out / f"{stem}.png", with_svg=True)
                (out / f"{stem}.svg").write_text(compose_svg(box))
                entries.append({"figure": fid, "title": title, "state": state or "default", "values": values,
                                "png": f"{stem}.png", "svg": f"{stem}.svg", "page": page.name,
                                "css_width": box["width"], "css_height": box["height"], "scale": SCALE})
                log(f"widgets.{fid} {state or 'default'}", f"{stem}.png, .svg")
                fault_point("export-figure")
    write_index(out, entries)
    return entries


def write_index(out: Path, entries: list[dict]) -> None:
    (out / "index.json").write_text(json.dumps(entries, indent=1) + "\n")
    rows = "\n".join(
        f'<tr><td>{html.escape(e["figure"])}</td><td>{html.escape(e["state"])}</td>'
        f'<td><code>{html.escape(json.dumps(e["values"]))}</code></td>'
        f'<td><a href="{e["png"]}">PNG</a> <a href="{e["svg"]}">SVG</a> <a href="{e["page"]}">page</a></td>'
        f'<td><img src="{e["png"]}" alt="" width="240"></td></tr>' for e in entries)
    (out / "index.html").write_text(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Figure exports</title></head><body>\n'
        "<h1>Figure exports</h1>\n<p>PNG at 2x resolution (whole figure), SVG (the plots), and a "
        "self-contained page per figure. Rebuild with <code>python build.py --export</code>.</p>\n"
        "<table>\n<tr><th>figure</th><th>state</th><th>controls</th><th>files</th><th></th></tr>\n"
        f"{rows}\n</table>\n</body></html>\n")
