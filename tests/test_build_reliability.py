"""Reliability of the build and of its server under damaged caches, signals, races and bad
inputs. Most tests call the functions involved on small folders; a few run build.py in a
subprocess (with --chapters 0 where the pages do not matter) and kill it at chosen points."""
from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from builder import common, output, pages, prerender, serve, wheels

ROOT = Path(__file__).resolve().parent.parent


def sigint_as_from_a_terminal() -> None:
    """In a child before exec: SIGINT back to its default, as a build started from a terminal
    has it. A shell starts a background job with SIGINT ignored, and a Python started so keeps
    it ignored (no KeyboardInterrupt), as a background job should; a test run from one would
    otherwise signal a build that cannot hear it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def flip_byte(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0xFF
    path.write_bytes(bytes(data))


def tiny_wheel(text: str = "x = 1\n") -> dict[str, bytes]:
    return {"tiny/__init__.py": text.encode() * 200, "tiny-1.0.dist-info/METADATA": b"Name: tiny\nVersion: 1.0\n",
            "tiny-1.0.dist-info/RECORD": b""}


def build_cmd(out: Path, *args: str, cache: Path | None = None, fault: str = "") -> subprocess.Popen:
    env = dict(os.environ, GUIDE_BUILD_FAULT=fault)
    if cache:
        env["GUIDE_CACHE"] = str(cache)
    return subprocess.Popen([sys.executable, str(ROOT / "build.py"), "--out", str(out), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_from_a_terminal)


def finish(p: subprocess.Popen) -> tuple[int, str]:
    out, err = p.communicate(timeout=600)
    return p.returncode, out + err


def cache_copy(dest: Path, processed: bool = True) -> Path:
    """A copy of the build's download cache (without the processed wheels if asked)."""
    shutil.copytree(common.CACHE, dest, ignore=None if processed else shutil.ignore_patterns("processed"))
    return dest


# --------------------------------------------------------------------------- 1-2. the processed cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def test_processed_wheel_records_its_sha256_and_is_reused(cache):
    made = []
    make = lambda: made.append(1) or ("tiny-1.0-py3-none-any.whl", tiny_wheel())  # noqa: E731
    name, data = wheels.processed_wheel("k", make)
    recorded = (cache / "processed/k" / (name + ".sha256")).read_text().strip()
    assert recorded == hashlib.sha256(data).hexdigest() == hashlib.sha256((cache / "processed/k" / name).read_bytes()).hexdigest()
    assert wheels.processed_wheel("k", make) == (name, data)
    assert made == [1]
    assert sorted(p.name for p in (cache / "processed/k").iterdir()) == [name, name + ".sha256"]


@pytest.mark.parametrize("damage", ["flipped byte", "no recorded sha256", "bad zip with its own sha256", "truncated"])
def test_damaged_processed_wheel_is_rebuilt_from_the_source(cache, capsys, damage):
    make = lambda: ("tiny-1.0-py3-none-any.whl", tiny_wheel())  # noqa: E731
    name, good = wheels.processed_wheel("k", make)
    whl, sha = cache / "processed/k" / name, cache / "processed/k" / (name + ".sha256")
    if damage == "flipped byte":
        flip_byte(whl)
    elif damage == "no recorded sha256":
        sha.unlink()
    elif damage == "truncated":
        whl.write_bytes(good[:100])
    else:   # a zip member damaged, the sidecar rewritten to match: only the CRC check sees it
        flip_byte(whl, at=good.index(b"x = 1") + 10 if b"x = 1" in good else 60)
        sha.write_text(hashlib.sha256(whl.read_bytes()).hexdigest())
    assert wheels.processed_wheel("k", make) == (name, good)
    assert whl.read_bytes() == good
    assert str(whl) in capsys.readouterr().out


def test_a_member_failing_its_crc_is_found():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("a.py", b"print('hello')\n" * 50)
    data = bytearray(buf.getvalue())
    data[100] ^= 0xFF          # inside the stored member
    assert wheels.wheel_problem(buf.getvalue()) is None
    assert "member a.py is damaged" in wheels.wheel_problem(bytes(data))
    assert "not a readable zip" in wheels.wheel_problem(b"PK\x03\x04 garbage")


def test_an_unreadable_wheel_is_named(tmp_path):
    bad = tmp_path / "param-2.4.2-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(common.BuildError, match=f"{bad}: not a readable wheel .*delete it"):
        wheels.read_wheel(bad)


def shipped_site(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A staging folder holding one wheel and a lock entry for it."""
    pyo = tmp_path / "staging" / common.PYO
    pyo.mkdir(parents=True)
    wheels.write_wheel(pyo / "tiny-1.0-py3-none-any.whl", files)
    data = (pyo / "tiny-1.0-py3-none-any.whl").read_bytes()
    lock = {"info": {}, "packages": {"tiny": {"file_name": "tiny-1.0-py3-none-any.whl",
                                              "sha256": hashlib.sha256(data).hexdigest()}}}
    (pyo / "pyodide-lock.json").write_text(json.dumps(lock))
    return tmp_path / "staging"


def test_shipped_wheels_must_match_the_lock_and_unzip(tmp_path):
    staging = shipped_site(tmp_path, tiny_wheel())
    wheels.check_shipped_wheels(staging)
    whl = staging / common.PYO / "tiny-1.0-py3-none-any.whl"
    flip_byte(whl)
    with pytest.raises(common.BuildError, match="tiny-1.0-py3-none-any.whl: sha256 differs from the lock's"):
        wheels.check_shipped_wheels(staging)
    # the lock hash recomputed from corrupt bytes (what the old build did) is still refused
    lock_path = staging / common.PYO / "pyodide-lock.json"
    lock = json.loads(lock_path.read_text())
    lock["packages"]["tiny"]["sha256"] = hashlib.sha256(whl.read_bytes()).hexdigest()
    lock_path.write_text(json.dumps(lock))
    with pytest.raises(common.BuildError, match=r"tiny-1.0-py3-none-any.whl \(tiny\): .*not shipping it"):
        wheels.check_shipped_wheels(staging)


def test_verify_reports_a_wheel_that_does_not_unzip(tmp_path):
    """A site built (by an older build) with a corrupt wheel listed in its manifest fails --verify."""
    staging = shipped_site(tmp_path, tiny_wheel())
    whl = staging / common.PYO / "tiny-1.0-py3-none-any.whl"
    whl.write_bytes(whl.read_bytes()[:-40])
    output.write_manifest(staging)
    assert output.verify_site(staging) == [f"{common.PYO}/tiny-1.0-py3-none-any.whl: not a readable zip "
                                          f"(File is not a zip file)"]


def test_corrupt_processed_wheels_never_ship(tmp_path):
    """A flipped byte in the processed packaging (pure) and numpy (wasm) wheels, and a
    truncated param wheel: the build rebuilds each from the verified upstream bytes, says
    which file it replaced, and the site it ships passes --verify with whole wheels."""
    cache = cache_copy(tmp_path / "cache")
    damaged = []
    for pattern in ("packaging-*.whl", "numpy-*.whl", "param-*.whl"):
        whl = next((cache / "processed").glob(f"*/{pattern}"))
        whl.write_bytes(whl.read_bytes()[:-5000]) if pattern.startswith("param") else flip_byte(whl)
        damaged.append(whl)
    out = tmp_path / "site"
    rc, log = finish(build_cmd(out, "--chapters", "0", cache=cache))
    assert rc == 0, log[-3000:]
    for whl in damaged:
        assert f"cache: {whl}: " in log
    assert "wheels => unzip and match the lock" in log
    assert output.verify_site(out) == []
    lock = json.loads((out / common.PYO / "pyodide-lock.json").read_text())
    for entry in lock["packages"].values():
        data = (out / common.PYO / entry["file_name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert wheels.wheel_problem(data) is None
    # the same bytes as the intact cache gives
    ref = json.loads((ROOT / "_site/MANIFEST.json").read_text())["files"] if (ROOT / "_site/MANIFEST.json").is_file() else {}
    for entry in lock["packages"].values():
        name = f"{common.PYO}/{entry['file_name']}"
        if name in ref and not name.endswith(f"{common.GUIDE_DIST}-{wheels.project_version()}-py3-none-any.whl"):
            assert ref[name][1] == entry["sha256"], name


# --------------------------------------------------------------------------- 3-6. signals, swap, races


def site_with(folder: Path, text: str) -> Path:
    """A one-page site with a manifest."""
    folder.mkdir(parents=True)
    (folder / "index.html").write_text(text)
    output.write_manifest(folder)
    return folder


def test_swap_exchanges_the_folders(tmp_path):
    out = site_with(tmp_path / "site", "old")
    staging = site_with(tmp_path / "site.tmp-1-ab", "new")
    output.swap_into_place(staging, out)
    assert (out / "index.html").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


@pytest.mark.parametrize("can_exchange", [True, False])
def test_a_failed_swap_leaves_the_old_site(tmp_path, monkeypatch, can_exchange):
    if not can_exchange:
        monkeypatch.setattr(output, "exchange", lambda a, b: False)
    out = site_with(tmp_path / "site", "old")
    with pytest.raises(OSError):
        output.swap_into_place(tmp_path / "site.tmp-1-gone", out)
    assert (out / "index.html").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_swap_by_renames_survives_a_leftover_old_folder_it_cannot_delete(tmp_path, monkeypatch, capsys):
    """Item 5: a `site.old` that cannot be deleted used to fail every later build."""
    monkeypatch.setattr(output, "exchange", lambda a, b: False)
    monkeypatch.setattr(output.shutil, "rmtree", lambda *a, **k: None)     # nothing can be deleted
    out = site_with(tmp_path / "site", "v0")
    site_with(tmp_path / "site.old", "stuck")
    for v in ("v1", "v2"):
        output.swap_into_place(site_with(output.sibling(out, "tmp"), v), out)
        assert (out / "index.html").read_text() == v
    assert "could not delete" in capsys.readouterr().out


SWAP_SCRIPT = """
import shutil, sys
from pathlib import Path
from builder import output
out = Path(sys.argv[1])
staging = output.sibling(out, "tmp")           # named for this process, as a build names it
shutil.copytree(sys.argv[2], staging)
try:
    with output.signals_interrupt():
        output.swap_into_place(staging, out)
except KeyboardInterrupt as e:
    print("interrupted", e)
    sys.exit(3)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_between_the_renames_waits_until_the_swap_is_done(tmp_path, sig):
    """Item 4: a signal between the two renames used to leave no site at all."""
    out = site_with(tmp_path / "site", "old")
    new = site_with(tmp_path / "src" / "new", "new")
    r = subprocess.run([sys.executable, "-c", SWAP_SCRIPT, str(out), str(new)],
                       cwd=ROOT, env=dict(os.environ, GUIDE_BUILD_FAULT=f"between-renames:{sig}"),
                       capture_output=True, text=True, timeout=60, preexec_fn=sigint_as_from_a_terminal)
    assert r.returncode == 3, r.stdout + r.stderr       # the signal arrived ...
    assert (out / "index.html").read_text() == "new"      # ... after the new site was in place
    assert output.verify_site(out) == []


@pytest.mark.parametrize("staging_complete", [True, False])
def test_a_build_killed_between_the_renames_is_recovered_on_the_next_start(tmp_path, staging_complete):
    out = site_with(tmp_path / "site", "old")
    new = site_with(tmp_path / "src" / "new", "new")
    r = subprocess.run([sys.executable, "-c", SWAP_SCRIPT, str(out), str(new)], cwd=ROOT,
                       env=dict(os.environ, GUIDE_BUILD_FAULT="between-renames:SIGKILL"), timeout=60)
    assert r.returncode == -signal.SIGKILL
    assert not out.exists(), "the kill did not land between the renames"
    (staging,) = tmp_path.glob("site.tmp-*")
    if not staging_complete:
        (staging / "index.html").write_text("half")        # its manifest no longer matches
    output.recover(out)
    assert (out / "index.html").read_text() == ("new" if staging_complete else "old")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site", "src"]


def test_recover_removes_only_dead_builds_folders(tmp_path):
    out = site_with(tmp_path / "site", "current")
    dead = dead_pid()
    stale = [site_with(tmp_path / f"site.tmp-{dead}-ab", "x"), site_with(tmp_path / f"site.old-{dead}-cd", "y")]
    running = site_with(tmp_path / f"site.tmp-{os.getppid()}-ef", "a build still running")
    output.recover(out)
    assert not any(p.exists() for p in stale)
    assert running.exists() and (out / "index.html").read_text() == "current"


def previous_site(tmp_path: Path) -> Path:
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("previous build")
    return out


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_mid_build_leaves_the_previous_site_and_no_staging_folder(tmp_path, sig):
    """Item 3: the build is signalled at its start (fault hook) and while it works."""
    out = previous_site(tmp_path)
    rc, log = finish(build_cmd(out, "--chapters", "0", fault=f"started:{sig}"))
    assert rc == 128 + getattr(signal, sig), log[-2000:]
    assert f"build interrupted ({sig})" in log and "Traceback" not in log, log[-2000:]
    assert (out / "index.html").read_text() == "previous build"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_a_signal_while_vendoring_and_a_kill_are_both_cleaned_up(tmp_path):
    """SIGTERM sent from outside while the runtime is being vendored; then a SIGKILL at the
    point where the new site is complete, whose staging folder the next build removes."""
    import time
    out = previous_site(tmp_path)
    p = build_cmd(out, "--chapters", "0")
    deadline = time.time() + 120
    while not list(tmp_path.glob("site.tmp-*/vendor/pyodide/*.whl")) and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    rc, log = finish(p)
    assert rc == 128 + signal.SIGTERM and "Traceback" not in log, log[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    rc, log = finish(build_cmd(out, "--chapters", "0", fault="staged:SIGKILL"))
    assert rc == -signal.SIGKILL
    assert len(list(tmp_path.glob("site.tmp-*"))) == 1 and (out / "index.html").read_text() == "previous build"
    rc, log = finish(build_cmd(out, "--chapters", "0"))
    assert rc == 0, log[-2000:]
    assert "(left by an interrupted build)" in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"] and output.verify_site(out) == []


def test_two_builds_at_once_with_an_empty_processed_cache(tmp_path):
    """Item 6: both used to fail (a shared .tmp name; one read the other's half-written wheel)."""
    cache = cache_copy(tmp_path / "cache", processed=False)
    a, b = (build_cmd(tmp_path / name, "--chapters", "0", cache=cache) for name in ("a", "b"))
    (rc_a, log_a), (rc_b, log_b) = finish(a), finish(b)
    assert rc_a == 0 and rc_b == 0, (log_a[-2000:], log_b[-2000:])
    assert (tmp_path / "a/MANIFEST.json").read_text() == (tmp_path / "b/MANIFEST.json").read_text()
    assert "waiting for another build to release the download cache" in log_a + log_b


def test_the_cache_lock_excludes_a_second_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from builder import common
        with common.locked(Path({str(tmp_path)!r}), "x"):
            print("held", flush=True)
            time.sleep(60)
        """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import fcntl
        fd = os.open(tmp_path, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        holder.kill()
        holder.wait()


def test_downloads_land_whole_or_not_at_all(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "log", lambda *a: None)
    writer = "import sys, pathlib; pathlib.Path(sys.argv[1], 'pkg.whl').write_bytes(b'whole'); sys.exit(int(sys.argv[2]))"
    (tmp_path / ".download-stale").mkdir()                 # left by a killed build
    common.download(tmp_path, sys.executable, "-c", writer, "{dir}", "0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg.whl"]
    (tmp_path / "pkg.whl").unlink()
    with pytest.raises(common.BuildError, match="command failed"):
        common.download(tmp_path, sys.executable, "-c", writer.replace("whole", "half"), "{dir}", "1")
    assert list(tmp_path.iterdir()) == []


def test_cache_files_are_written_under_unique_names(tmp_path):
    names = set()
    real_replace = os.replace

    def spy(src, dst):
        names.add(Path(src).name)
        real_replace(src, dst)
    os.replace = spy
    try:
        for _ in range(3):
            common.write_atomic(tmp_path / "w.whl", lambda t: t.write_bytes(b"x"))
    finally:
        os.replace = real_replace
    assert len(names) == 3 and all(n.startswith(".w.whl.") and n.endswith(".tmp") for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.whl"]


# --------------------------------------------------------------------------- 7. chapters


def chapter_file(folder: Path, name: str, front: str, body: str = "Text.\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(f"+++\n{front}\n+++\n{body}")
    return p


@pytest.mark.parametrize("slug", ["../escaped", "a/b", "Upper", "", "x.html", 3])
def test_a_slug_that_is_not_a_plain_name_is_refused(tmp_path, slug):
    p = chapter_file(tmp_path, "01-x.md", f'number = 1\ntitle = "X"\nsummary = "S"\nslug = {json.dumps(slug)}')
    with pytest.raises(common.BuildError, match=f"{p}: slug .* must be lower-case letters, digits and hyphens"):
        pages.read_chapter(p)


def test_duplicate_slugs_and_numbers_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "SITE_SRC", tmp_path)
    chapter_file(tmp_path / "chapters", "01-a.md", 'number = 1\ntitle = "A"\nsummary = "S"\nslug = "same"')
    chapter_file(tmp_path / "chapters", "02-b.md", 'number = 2\ntitle = "B"\nsummary = "S"\nslug = "same"')
    with pytest.raises(common.BuildError, match="02-b.md: slug 'same' is also the slug of 01-a.md"):
        pages.read_chapters()
    chapter_file(tmp_path / "chapters", "02-b.md", 'number = 1\ntitle = "B"\nsummary = "S"\nslug = "other"')
    with pytest.raises(common.BuildError, match="02-b.md: number 1 is also the number of 01-a.md"):
        pages.read_chapters()


@pytest.fixture(scope="module")
def env():
    import jinja2
    return jinja2.Environment(loader=jinja2.FileSystemLoader(common.SITE_SRC / "templates"),
                              undefined=jinja2.StrictUndefined, autoescape=False)


def shared(figure_ids=("ch03-roofline",)):
    fig = prerender.Prerendered("ch03-roofline", "Roofline", "<svg></svg>", "{}", 300)
    return {"FIGURES": {f: fig for f in figure_ids}, "REFERENCES": {}, "sim": pages.sim_namespace()}


FRONT = 'number = 4\ntitle = "X"\nsummary = "S"\nslug = "x"'


@pytest.mark.parametrize("call", ["figure('ch03-roofline')", 'figure("ch03-roofline")', "figure(id='ch03-roofline')",
                                  "figure('ch03-roofline', 'A caption.')"])
def test_a_chapters_figures_are_its_figure_calls(tmp_path, env, call):
    """Item 7: a figure placed with single quotes used to be left out of the page's list."""
    p = chapter_file(tmp_path, "04-x.md", FRONT, "Text.\n\n{{ " + call + " }}\n")
    c = pages.read_chapter(p)
    assert c.figures == ["ch03-roofline"]
    assert 'data-figure="ch03-roofline"' in pages.render_body(env, c, shared())


def test_figures_are_listed_in_the_order_they_appear(tmp_path, env):
    body = ('{{ figure("ch04-scheduler") }}\n\n{# figure("ch05-load") is not placed #}\n'
            '{% call takeaway() %}Text.{% endcall %}\n\n{{ figure("ch03-roofline") }}\n')
    c = pages.read_chapter(chapter_file(tmp_path, "04-x.md", FRONT, body))
    assert c.figures == ["ch04-scheduler", "ch03-roofline"]
    html = pages.render_body(env, c, shared(c.figures))
    assert html.index('data-figure="ch04-scheduler"') < html.index('data-figure="ch03-roofline"')


@pytest.mark.parametrize("body, message", [
    ('{{ figure("ch03-roofline") }}\n\nText.\n\n{{ figure("ch03-roofline") }}\n',
     r":11: figure 'ch03-roofline' is placed twice \(also at line 7\); a chapter places each figure once"),
    ('Text.\n\n{{ figure("ch03-roofline-v2") }}\n',
     r":9: unknown figure 'ch03-roofline-v2': no module widgets/ch03_roofline_v2.py \(known: ch00-decode-meter, "),
    ('{% set f = "ch03-roofline" %}{{ figure(f) }}\n',
     r":7: figure\(\) must name its figure with a literal string"),
])
def test_a_figure_placed_twice_or_unknown_is_refused_with_its_line(tmp_path, body, message):
    p = chapter_file(tmp_path, "04-x.md", FRONT, body)
    with pytest.raises(common.BuildError, match=f"^{p}{message}"):
        pages.read_chapter(p)


def test_a_figures_line_in_front_matter_is_refused(tmp_path):
    """Chapters once listed their figures in front matter; the list now comes from the text."""
    p = chapter_file(tmp_path, "04-x.md", FRONT + '\nfigures = ["ch03-roofline"]', '{{ figure("ch03-roofline") }}\n')
    with pytest.raises(common.BuildError, match=f"^{p}: front matter lists `figures`; delete that line"):
        pages.read_chapter(p)


def test_a_figure_the_text_places_otherwise_than_its_calls_is_refused(tmp_path, env):
    """A figure() call in a loop renders twice from one call: the page would load it once."""
    body = '{% for i in range(2) %}{{ figure("ch03-roofline") }}{% endfor %}\n'
    c = pages.read_chapter(chapter_file(tmp_path, "04-x.md", FRONT, body))
    with pytest.raises(common.BuildError, match=r"places figures \['ch03-roofline', 'ch03-roofline'\] but its "
                                                r"figure\(\) calls are \['ch03-roofline'\]"):
        pages.render_body(env, c, shared())


def test_a_figure_in_two_chapters_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "SITE_SRC", tmp_path)
    chapter_file(tmp_path / "chapters", "01-a.md", 'number = 1\ntitle = "A"\nsummary = "S"\nslug = "a"',
                 '{{ figure("ch03-roofline") }}\n')
    chapter_file(tmp_path / "chapters", "02-b.md", 'number = 2\ntitle = "B"\nsummary = "S"\nslug = "b"',
                 '{{ figure("ch03-roofline") }}\n')
    with pytest.raises(common.BuildError, match="02-b.md: figure 'ch03-roofline' is placed by 01-a.md too"):
        pages.read_chapters()


def test_no_chapter_source_lists_its_figures_in_front_matter():
    chapters = pages.read_chapters()
    assert [c.number for c in chapters if not c.figures] == [24]      # only the reading list has none
    for c in chapters:
        assert "\nfigures" not in c.source.read_text().split("+++")[1], c.source.name


def test_a_failing_sim_call_names_the_chapter_file_and_line(tmp_path, env):
    body = "Line one.\n\nLine three.\n\n{{ sim.kv.kv_size(sim.kv.KVSizeParams(batch=0)).kv_bytes }}\n"
    p = chapter_file(tmp_path, "06-kv.md", 'number = 6\ntitle = "KV"\nsummary = "S"\nslug = "kv"', body)
    c = pages.read_chapter(p)
    # front matter: lines 1-4 (+++, number, title, slug ... +++); the call is on body line 5
    line = p.read_text().splitlines().index(body.splitlines()[4]) + 1
    with pytest.raises(common.BuildError) as e:
        pages.render_body(env, c, shared())
    assert str(e.value) == f"{p}:{line}: ValueError: batch must be >= 1, got 0"


def test_a_template_syntax_error_names_the_line(tmp_path, env):
    p = chapter_file(tmp_path, "06-kv.md", 'number = 6\ntitle = "KV"\nsummary = "S"\nslug = "kv"', "A\n\n{{ oops( }}\n")
    line = p.read_text().splitlines().index("{{ oops( }}") + 1
    with pytest.raises(common.BuildError, match=rf"{p}:{line}: TemplateSyntaxError"):
        pages.render_body(env, pages.read_chapter(p), shared())


# --------------------------------------------------------------------------- 8-10. the server


@pytest.fixture(scope="module")
def small_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "app.js").write_text("console.log(1);\n" * 1000)
    (root / "app.js.gz").write_bytes(b"\x1f\x8b gz copy")
    (root / "plain.txt").write_text("plain\n")
    with serve.serving(root) as base:
        yield base.split(":")[-1].rstrip("/")


def get(port: str, path: str, headers: dict | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    r.body = r.read()
    conn.close()
    return r


@pytest.mark.parametrize("length", [255, 256, 300, 5000])
def test_an_overlong_path_segment_gets_a_404(small_site, length):
    r = get(small_site, "/" + "a" * length + ".js", {"Accept-Encoding": "gzip"})
    assert r.status == 404
    assert get(small_site, "/plain.txt").status == 200          # the server is still serving


@pytest.mark.parametrize("header, gzip", [
    ("gzip", True), ("gzip, deflate, br", True), ("br;q=1.0, gzip;q=0.8", True), ("*", True),
    ("gzip;q=0", False), ("gzip; q=0.0, identity", False), ("identity", False), ("", False),
    ("*;q=0", False), ("gzip;q=0, *", False), ("deflate, *;q=0.1", True), ("GZIP", True), ("gzip;q=bad", False),
])
def test_gzip_only_when_accepted(small_site, header, gzip):
    assert serve.accepts_gzip(header) is gzip
    r = get(small_site, "/app.js", {"Accept-Encoding": header})
    assert r.status == 200
    assert (r.getheader("Content-Encoding") == "gzip") is gzip
    assert r.getheader("Vary") == "Accept-Encoding"
    assert r.body == (b"\x1f\x8b gz copy" if gzip else b"console.log(1);\n" * 1000)


def test_a_file_without_a_gz_copy_has_no_vary(small_site):
    assert get(small_site, "/plain.txt", {"Accept-Encoding": "gzip"}).getheader("Vary") is None


def test_a_port_in_use_is_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(common.BuildError, match=f"port {port} on 127.0.0.1 is already in use; .*PORT={port + 1}"):
            with serve.serving(tmp_path, port):
                pass
        r = subprocess.run([sys.executable, str(ROOT / "build.py"), "--serve", "--no-build", "--out", str(tmp_path),
                            "--port", str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "Traceback" not in r.stderr
