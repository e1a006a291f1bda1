"""Build tests: every page and vendored file is there, pinned inputs are enforced,
a broken input stops the build without touching the previous site, and two builds of
the same inputs are byte-identical."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from builder import common, output, pages, runtime, wheels
from tests.test_build_reliability import build_cmd, finish

ROOT = Path(__file__).resolve().parent.parent


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def run_build(out: Path, *args: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if cache:
        env["GUIDE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, str(ROOT / "build.py"), "--out", str(out), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_site_has_every_page(site_dir):
    chapters = pages.read_chapters()
    assert chapters, "no chapters"
    for name in ["index.html", "references.html", *(c.file for c in chapters),
                 *(f"figure-{f}.html" for c in chapters for f in c.figures)]:
        assert (site_dir / name).is_file(), name
    index = (site_dir / "index.html").read_text()
    for c in chapters:
        assert f'href="{c.file}"' in index, f"{c.file} missing from the table of contents"
    for c in chapters:
        html = (site_dir / c.file).read_text()
        for fid in c.figures:
            assert f'data-figure="{fid}" data-state="static"' in html
            assert 'class="fig-prerender"' in html and 'class="fig-poster"' in html


def test_every_file_matches_the_manifest(site_dir):
    assert output.verify_site(site_dir) == []


def test_vendored_runtime_matches_its_pins(site_dir):
    pyo = site_dir / common.PYO
    for name, digest in runtime.PYODIDE_CORE_SHA256.items():
        if name != "pyodide-lock.json":
            assert sha(pyo / name) == digest, name
    lock = json.loads((pyo / "pyodide-lock.json").read_text())
    assert lock["info"]["version"] == runtime.PYODIDE_VERSION
    for name, entry in lock["packages"].items():
        wheel = pyo / entry["file_name"]
        assert wheel.is_file(), entry["file_name"]
        assert sha(wheel) == entry["sha256"], f"{name}: lock sha256 differs from the served wheel"
        for dep in entry["depends"]:
            assert dep in lock["packages"], f"{name} depends on {dep}, which is not in the lock"
    # the JS the page runs comes out of the very bokeh/panel wheels pinned for Python
    pins = (ROOT / "site/runtime/requirements-browser.txt").read_text()
    bokeh_whl = next((common.CACHE / "pure").glob("bokeh-*.whl"))
    assert hashlib.sha256(bokeh_whl.read_bytes()).hexdigest() in pins
    with zipfile.ZipFile(bokeh_whl) as z:
        assert z.read("bokeh/server/static/js/bokeh.min.js") == (site_dir / "vendor/bokeh/bokeh.min.js").read_bytes()
    panel_whl = next((common.CACHE / "pure").glob("panel-*.whl"))
    with zipfile.ZipFile(panel_whl) as z:
        version = lock["packages"]["panel"]["version"]
        assert z.read("panel/dist/panel.min.js") == \
            (site_dir / f"vendor/panel/{version}/dist/panel.min.js").read_bytes()


def test_figures_import_only_vendored_packages(site_dir):
    """Building every figure in CPython imports nothing the browser runtime lacks."""
    lock = json.loads((site_dir / common.PYO / "pyodide-lock.json").read_text())
    shipped = {imp for e in lock["packages"].values() for imp in e["imports"]}
    ids = [f for c in pages.read_chapters() for f in c.figures]
    code = ("import sys, json, widgets\n"
            f"for fid in {ids!r}: widgets.build(fid)\n"
            "tops = {m.split('.')[0] for m in sys.modules}\n"
            "print(json.dumps(sorted(t for t in tops if 'site-packages' in (getattr(sys.modules.get(t), '__file__', None) or ''))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    third_party = {m for m in imported if not m.startswith("_")}
    assert {"numpy", "bokeh", "panel"} <= third_party
    # tornado is imported by Bokeh/Panel on CPython only (its server), and psutil by Bokeh's
    # server when it is installed (IPython, a test dependency, brings it); the browser's
    # Panel takes neither
    missing = third_party - shipped - {"tornado", "psutil"}
    assert not missing, f"figures import {sorted(missing)}, which the browser runtime does not ship"


def test_two_builds_are_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    # both at once, into folders of their own (two builds in a row share the same warm
    # caches; tests/test_build_reliability.py has two at once with a cold one)
    for rc, log in [finish(p) for p in [build_cmd(a), build_cmd(b)]]:
        assert rc == 0, log[-2000:]
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    different = [str(f) for f in files_a if (a / f).read_bytes() != (b / f).read_bytes()]
    assert different == []


def test_tampered_download_stops_the_build_and_keeps_the_old_site(tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(common.CACHE, cache, ignore=shutil.ignore_patterns("processed"))
    wheel = next((cache / "pure").glob("param-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("previous build")
    r = run_build(out, cache=cache)
    assert r.returncode == 1
    assert "build failed" in r.stderr and wheel.name in r.stderr and "sha256" in r.stderr, r.stderr
    assert (out / "index.html").read_text() == "previous build"
    assert not list(tmp_path.glob("site.tmp-*")), "a staging folder was left behind"


def make_release_folder(dest: Path) -> Path:
    """A folder laid out like an official Pyodide 0.27.7 release, made from the pinned sources."""
    dest.mkdir()
    with tarfile.open(common.CACHE / f"pyodide-{runtime.PYODIDE_VERSION}.tgz") as tf:
        for name in runtime.PYODIDE_CORE_SHA256:
            (dest / name).write_bytes(tf.extractfile(f"package/{name}").read())
    with zipfile.ZipFile(common.CACHE / runtime.WASM_CARRIER_FILE) as z:
        for n in z.namelist():
            if n.startswith(runtime.WASM_CARRIER_PREFIX) and n.endswith(".whl") and "/wheels/" not in n:
                (dest / n[len(runtime.WASM_CARRIER_PREFIX):]).write_bytes(z.read(n))
    return dest


def test_pyodide_release_folder_is_an_equivalent_source(site_dir, tmp_path):
    release = make_release_folder(tmp_path / "pyodide")
    out = tmp_path / "site"
    r = run_build(out, "--pyodide-dir", str(release))
    assert r.returncode == 0, r.stderr[-2000:]
    ours = json.loads((out / "MANIFEST.json").read_text())
    default = json.loads((site_dir / "MANIFEST.json").read_text())
    assert ours == default, "a release folder and the npm/PyPI sources gave different sites"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_broken_release_folder_is_rejected(tmp_path, damage):
    release = make_release_folder(tmp_path / "pyodide")
    victim = release / "pyodide.asm.wasm"
    if damage == "missing":
        victim.unlink()
    else:
        victim.write_bytes(victim.read_bytes()[:-1000])
    r = run_build(tmp_path / "site", "--pyodide-dir", str(release))
    assert r.returncode == 1
    assert "pyodide.asm.wasm" in r.stderr
    assert ("missing" in r.stderr) if damage == "missing" else ("sha256" in r.stderr), r.stderr


def test_verify_reports_a_changed_file(site_dir, tmp_path):
    copy = tmp_path / "site"
    shutil.copytree(site_dir, copy)
    (copy / "static/guide.js").write_text("// changed\n")
    (copy / "vendor/pyodide/pyodide.mjs").unlink()
    problems = output.verify_site(copy)
    assert any("static/guide.js" in p and "differs" in p for p in problems), problems
    assert any("pyodide.mjs: missing" in p for p in problems), problems


def test_pages_load_nothing_from_other_hosts(site_dir):
    """No script, stylesheet, image or frame in any page is fetched from another host."""
    import re
    offenders = []
    for p in sorted(site_dir.glob("*.html")):
        text = p.read_text()
        offenders += [f"{p.name}: {u}" for u in re.findall(r'\ssrc="((?:https?:)?//[^"]+)"', text)]
        offenders += [f"{p.name}: {u}" for u in re.findall(r'<link [^>]*href="((?:https?:)?//[^"]+)"', text)]
    assert offenders == []


def test_table_of_contents_lists_written_then_planned_chapters(tmp_path, monkeypatch):
    chapters = pages.read_chapters()
    rows = pages.table_of_contents(chapters)
    assert [r["number"] for r in rows] == sorted(r["number"] for r in rows)
    written = [r for r in rows if r["file"]]
    assert [(r["number"], r["title"], r["file"]) for r in written] == [(c.number, c.title, c.file) for c in chapters]
    assert all(r["summary"] for r in rows)
    assert [r["number"] for r in rows] == [*range(16), *range(17, 25)]   # 0-15, 17-24: written or planned
    assert [r["number"] for r in rows if not r["file"]] == [23]   # Part II's still to write
    assert [r["part"] for r in rows if r["part_starts"]] == [title for _, title in pages.PARTS]
    assert all(r["part"] == pages.part_of(r["number"]) for r in rows)
    # a planned chapter that has been written must leave the plan
    (tmp_path / "plan.toml").write_text('[[planned]]\nnumber = 3\ntitle = "x"\nsummary = "y"\n')
    monkeypatch.setattr(common, "SITE_SRC", tmp_path)
    with pytest.raises(common.BuildError, match="chapter 3 is written now"):
        pages.table_of_contents(chapters)


def test_chapter_zero_contents_table_is_generated(site_dir):
    html = (site_dir / "ch00-memory-wall.html").read_text()
    for c in pages.read_chapters()[1:]:
        assert f'<a href="{c.file}">{c.number}. {c.title}</a>' in html
    for row in pages.table_of_contents(pages.read_chapters()):
        if row["part_starts"] and row["number"] > 0:           # each part's heading row
            assert f"<td><strong>{row['part']}</strong></td>" in html
        if not row["file"]:                                     # a planned chapter: its title, no link
            assert f"<td>{row['number']}. {row['title']}</td>" in html
    planned = [r for r in pages.table_of_contents(pages.read_chapters()) if not r["file"]]
    assert html.count(" (in preparation)</td>") == len(planned)


def test_the_browser_wheel_ships_only_the_browser_packages(site_dir):
    """The guide's wheel holds sim/ and widgets/ (pyproject.toml [tool.guide]) and nothing
    that runs only at build time: no builder/ (the poster painter lives there now)."""
    assert wheels.browser_packages() == ["sim", "widgets"]
    lock = json.loads((site_dir / common.PYO / common.LOCK_FILE).read_text())
    entry = lock["packages"][common.GUIDE_PACKAGE]
    with zipfile.ZipFile(site_dir / common.PYO / entry["file_name"]) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sim", "widgets"} and entry["imports"] == ["sim", "widgets"]
    assert not [n for n in names if "poster" in n or n.startswith("builder")]
    assert "widgets/runtime.py" in names and "widgets/base.py" in names
    assert (ROOT / "builder/posters.py").is_file() and not (ROOT / "widgets/poster.py").exists()


def page_runtime_config(html: str) -> dict:
    import re
    m = re.search(r"runtime: (\{.*?\}) \};", html)
    assert m, "the page carries no runtime config for its worker"
    return json.loads(m.group(1))


def test_pages_tell_the_worker_where_the_runtime_is(site_dir):
    """Every page with figures carries the build's layout for static/worker.js, and each
    path in it is a file or folder of the built site."""
    chapters = pages.read_chapters()
    want = page_runtime_config((site_dir / next(c.file for c in chapters if c.figures)).read_text())
    assert want == pages.worker_config(want["snapshot"], want["files"])   # the snapshot: tests/test_snapshot_build.py
    assert want["files"] == pages.runtime_files(site_dir)                 # what the worker checks on a failed start
    for c in chapters:
        for name in [c.file, *(f"figure-{f}.html" for f in c.figures)] if c.figures else []:
            assert page_runtime_config((site_dir / name).read_text()) == want, name
    no_figures = ["index.html", *(c.file for c in chapters if not c.figures)]
    assert len(no_figures) > 1                                           # e.g. the reading list
    for name in no_figures:                                              # no figures, no worker
        assert 'runtime: ' not in (site_dir / name).read_text(), name
    assert (site_dir / want["module"]).is_file() and (site_dir / want["lock"]).is_file()
    assert (site_dir / want["pyodide"] / "pyodide.asm.wasm").is_file()
    assert (site_dir / want["panel_cdn_root"]).is_dir()
    lock = json.loads((site_dir / want["lock"]).read_text())
    assert want["package"] in lock["packages"]


def test_the_static_js_has_no_copy_of_what_the_build_writes_into_the_page():
    """worker.js and guide.js read the runtime's paths and the package name from the page."""
    values = {v for v in pages.worker_config().values() if isinstance(v, str)}
    values |= {common.VENDOR + "/", common.LOCK_FILE, common.GUIDE_PACKAGE, common.GUIDE_DIST,
               common.PANEL_CDN_ROOT.rstrip("/")}
    for js in ("worker.js", "guide.js"):
        text = (common.SITE_SRC / "static" / js).read_text()
        assert [v for v in sorted(values) if v in text] == [], js
    worker = (common.SITE_SRC / "static/worker.js").read_text()
    for key in pages.worker_config():
        assert f"runtime.{key}" in worker, key
