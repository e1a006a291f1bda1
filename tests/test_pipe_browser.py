"""The benchmarks' uninspected browser (tests/pipe_browser.py): it evaluates, waits, reports
the page's errors and fetches, and loads a chapter of the guide the way tests/bench_pages.py
times it."""
from __future__ import annotations

import os
import time

import pytest

from builder.serve import serving
from tests.pipe_browser import ProtocolError, pipe_browser

PAGE = """<!doctype html><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>pipe</title>
<p id="out">start</p>
<script>
console.error("logged before anything was attached");
setTimeout(() => { throw new Error("thrown later"); }, 0);
const w = new Worker("w.js");
w.onmessage = (e) => { document.getElementById("out").textContent = e.data; };
fetch("data.txt").then((r) => r.text()).then((t) => { window.fetched = t; });
</script>
"""


@pytest.fixture
def small_site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text(PAGE)
    (root / "w.js").write_text("postMessage('worker ' + (6 * 7));\n")
    (root / "data.txt").write_text("forty-two")
    with serving(root) as base:
        yield base


def test_the_pipe_browser_evaluates_waits_and_reports_errors_and_fetches(small_site, tmp_path):
    with pipe_browser(tmp_path / "profile") as b:
        page = b.new_page()
        page.goto(small_site + "index.html")
        assert page.wait_for("document.getElementById('out').textContent === 'worker 42'", timeout_s=30)
        assert page.wait_for("window.fetched", timeout_s=30) == "forty-two"
        assert page.evaluate("1 + 2") == 3
        assert page.evaluate("(x) => x.a * 2", {"a": 21}) == 42
        assert page.evaluate("async ([a, b]) => a + b", [40, 2]) == 42
        assert page.evaluate("[innerWidth, innerHeight]") == [1100, 900]
        with pytest.raises(ProtocolError, match="nope"):
            page.evaluate("(() => { throw new Error('nope'); })()")
        with pytest.raises(TimeoutError):
            page.wait_for("false", timeout_s=0.3)
        # Playwright's signature, as tests.browser.wait_states calls it
        assert page.wait_for_function("(n) => window.fetched.length === n && 'yes'", arg=9,
                                      timeout=30000, polling=50) == "yes"
        with pytest.raises(TimeoutError):
            page.wait_for_function("() => false", timeout=300)
        log = page.log(small_site)
        errors = log.errors()
        assert ("error", "logged before anything was attached") in errors
        assert any(kind == "pageerror" and "thrown later" in text for kind, text in errors)
        urls = log.requests
        assert urls[0] == small_site + "index.html"
        assert small_site + "data.txt" in urls and small_site + "w.js" in urls
        assert log.off_site() == []
        assert page.log("http://elsewhere.invalid/").off_site() == urls
        pid = b.pid
    with pytest.raises(ChildProcessError):       # closed and reaped
        os.waitpid(pid, os.WNOHANG)


def test_a_chapter_loads_live_in_the_pipe_browser_as_the_benchmark_times_it(server, tmp_path):
    from tests.bench_pages import load_once

    figures = ["ch03-roofline", "ch03-hierarchy"]
    counters: dict = {}
    with pipe_browser(tmp_path / "profile") as b:
        t0 = time.monotonic()
        res = load_once(b, server, "ch03-gpu.html", figures, counters, moves=2)
    assert set(res["states"].values()) == {"live"}, res["states"]
    assert res["boot"]["path"] == "snapshot"
    assert 0 < res["poster_ms"] < res["live_ms"] < (time.monotonic() - t0) * 1000
    assert res["errors"] == [] and res["off_site"] == []
    assert len(res["moves"]) == 2 and all(0 < m["data_ms"] <= m["done_ms"] for m in res["moves"])


def test_the_phone_profile_is_narrow_touch_and_slower(small_site, tmp_path):
    """`./dev bench --mobile`: 390 CSS px at 3x, touch, and the CPU throttled 4x (a loop of
    fixed work takes clearly longer than on the same browser unthrottled)."""
    from tests.pipe_browser import PHONE

    loop = "() => { const t = performance.now(); let x = 0; for (let i = 0; i < 3e7; i++) x += i % 7; return performance.now() - t; }"
    took = {}
    for name, device in (("desktop", None), ("phone", PHONE)):
        with pipe_browser(tmp_path / f"profile-{name}", **({"device": device} if device else {})) as b:
            page = b.new_page()
            page.goto(small_site + "index.html")
            shape = page.evaluate("() => [innerWidth, devicePixelRatio, navigator.maxTouchPoints]")
            took[name] = min(page.evaluate(loop) for _ in range(3))
        if device:
            assert shape == [390, 3, 5], shape
        else:
            assert shape[0] == 1100 and shape[2] == 0, shape
    assert took["phone"] > 2 * took["desktop"], took
