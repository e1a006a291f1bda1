"""`python -m widgets serve ID`: one figure served by `panel serve`, its Python in the server."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from sim.batching import BatchSweepParams, sweep_batch
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

READOUT_JS = """([key]) => {
  const doc = Bokeh.documents[0];
  if (!doc) return null;
  for (const root of doc.roots()) for (const m of [root, ...root.references()])
    if ((m.css_classes || []).includes(`out-${key}`)) return m.text;
  return null;
}"""
SET_JS = """([key, value]) => {
  for (const root of Bokeh.documents[0].roots()) for (const m of [root, ...root.references()])
    if ((m.css_classes || []).includes(`ctl-${key}`)) { m.value = value; return true; }
  return false;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def served():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "widgets", "serve", "ch04-batch-knee", "gpu=H200",
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/app"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"panel serve did not start:\n{proc.stdout.read().decode()}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the server went with it (`panel serve` runs in a child process)
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break
        assert time.monotonic() < deadline, f"panel serve still answers on port {port} after the command was stopped"
        time.sleep(0.2)


def test_served_figure_follows_a_control(chromium, served):
    page = chromium.new_page()
    try:
        page.goto(served)
        page.wait_for_function(READOUT_JS, arg=["numbers"], timeout=120_000)
        r1 = sweep_batch(BatchSweepParams(gpu="H200", batch=1))
        first = page.evaluate(READOUT_JS, ["numbers"])
        assert f"{r1.step_time_s_at_batch * 1e3:.2f} ms" in first        # the state given on the command line
        assert page.evaluate(SET_JS, ["batch", 64])
        r64 = sweep_batch(BatchSweepParams(gpu="H200", batch=64))
        want = f"{r64.step_time_s_at_batch * 1e3:.2f} ms"
        page.wait_for_function(f"(k) => ({READOUT_JS})(k)?.includes({want!r})", arg=["numbers"], timeout=60_000)
        assert f"{r64.tokens_per_s_total_at_batch:,.0f} tokens/s" in page.evaluate(READOUT_JS, ["numbers"])
    finally:
        page.close()


def test_serve_refuses_a_bad_value_before_starting():
    out = subprocess.run([sys.executable, "-m", "widgets", "serve", "ch04-batch-knee", "batch=0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "figure ch04-batch-knee: batch=0 is not valid (out of range)" in out.stderr
