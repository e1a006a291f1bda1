"""builder.export: PNG (2x) and SVG pictures of figures in their states, and offline pages.

Exports two figures (the whole set takes minutes: `python build.py --no-build --export`)."""
from __future__ import annotations

import hashlib
import json
import os
import struct
import xml.etree.ElementTree as ET

import pytest

import widgets
from builder.common import BuildError
from builder.export import export_figures, inline_panel_css, planned_files
from builder.export_folder import MANIFEST
from sim.cli import UsageError

pytestmark = [pytest.mark.browser, pytest.mark.slow]
FIGURES = ["ch03-hierarchy", "ch04-batch-knee"]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    entries = export_figures(out, FIGURES)
    return out, entries


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_every_state_of_every_figure_is_exported(exported):
    out, entries = exported
    assert json.loads((out / "index.json").read_text()) == entries
    want = [(f, s) for f in FIGURES for s in ["default", *widgets.states(f)]]
    assert [(e["figure"], e["state"]) for e in entries] == want
    index = (out / "index.html").read_text()
    for e in entries:
        assert (out / e["png"]).is_file() and (out / e["svg"]).is_file() and (out / e["page"]).is_file()
        assert f'href="{e["png"]}"' in index and f'href="{e["svg"]}"' in index


def test_png_is_the_layout_at_twice_its_css_size(exported):
    out, entries = exported
    for e in entries:
        width, height = png_size((out / e["png"]).read_bytes())
        assert abs(width - 2 * e["css_width"]) <= 1 and abs(height - 2 * e["css_height"]) <= 1, e
        view = widgets.figure(e["figure"], None if e["state"] == "default" else e["state"])
        assert e["css_width"] >= max(p.width for p in view.plots)     # the whole figure, not one plot


def test_states_give_different_pictures(exported):
    out, entries = exported
    for fid in FIGURES:
        digests = [hashlib.sha256((out / e["png"]).read_bytes()).hexdigest() for e in entries if e["figure"] == fid]
        assert len(set(digests)) == len(digests), fid


def test_svg_holds_every_plot_at_the_layout_size(exported):
    out, entries = exported
    for e in entries:
        root = ET.parse(out / e["svg"]).getroot()
        assert root.tag == f"{SVG}svg"
        assert int(root.get("width")) == round(e["css_width"]) and int(root.get("height")) == round(e["css_height"])
        plots = root.findall(f"{SVG}g/{SVG}svg")
        assert len(plots) == len(widgets.build(e["figure"]).plots), e
        assert all(p.findall(f".//{SVG}path") or p.findall(f".//{SVG}text") for p in plots)
    svg = (out / "ch04-batch-knee.svg").read_text()
    assert "Decode step time" in svg and "Tokens per second" in svg     # plot titles drawn as SVG text


def test_offline_page_renders_with_the_network_blocked(exported, chromium):
    out, _ = exported
    for fid in FIGURES:
        page = chromium.new_page()
        asked: list[str] = []

        def route(r):
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                asked.append(r.request.url)
                r.abort()
        page.route("**/*", route)
        try:
            page.goto((out / f"figure-{fid}.html").as_uri())
            page.wait_for_function("() => window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle",
                                   timeout=60_000)
            drawn = page.evaluate("""() => {
              const out = {plots: 0, numbers: null};
              function walk(v) {
                if (v.model.type === "Figure") { const r = v.el.getBoundingClientRect();
                                                 if (r.width > 0 && r.height > 0) out.plots++; return; }
                if ((v.model.css_classes || []).includes("out-numbers")) out.numbers = v.el.shadowRoot?.textContent || "";
                for (const c of (v.children ? v.children() : [])) walk(c);
              }
              for (const r of Bokeh.index.roots) walk(r);
              return out;
            }""")
        finally:
            page.close()
        assert asked == []
        assert drawn["plots"] == len(widgets.build(fid).plots)
    assert "step time" in drawn["numbers"]            # ch04-batch-knee's readout, rendered


def test_export_refuses_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="is not empty and holds no export of this guide"):
        export_figures(tmp_path, ["ch03-hierarchy"])
    assert os.listdir(tmp_path) == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "keep me"


def test_the_manifest_lists_every_file_written_with_its_hash(exported):
    out, _ = exported
    manifest = json.loads((out / MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    assert set(manifest["files"]) == planned_files(FIGURES)
    for name, f in manifest["files"].items():
        assert f == {"bytes": (out / name).stat().st_size, "sha256": hashlib.sha256((out / name).read_bytes()).hexdigest()}


def test_panel_stylesheets_are_inlined():
    from panel.io.resources import CDN_DIST

    page = f'"url": "{CDN_DIST}css/loading.css"'
    inlined = inline_panel_css(page)
    assert CDN_DIST not in inlined and '"url": "data:text/css;base64,' in inlined
    with pytest.raises(BuildError, match="does not ship"):
        inline_panel_css(f'"{CDN_DIST}css/no-such-sheet.css"')
