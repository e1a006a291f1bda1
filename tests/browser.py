"""Headless Chromium against the built site: shared by the browser tests and the benchmark.

Debian's /usr/bin/chromium is used (Playwright's own browser download is not needed),
started with flags that keep it off the network; every request is recorded so tests
can assert that nothing but the local server was contacted.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROME_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions",
    # no host name resolves except the loopback server: nothing can leave the machine
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]

STATE_JS = "(id) => document.querySelector(`[data-figure=\"${id}\"]`)?.dataset.state"


@dataclass
class PageLog:
    """Everything a page said and fetched."""

    base: str
    console: list[tuple[str, str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    def errors(self) -> list[tuple[str, str]]:
        return [c for c in self.console if c[0] in ("error", "pageerror")]

    def off_site(self) -> list[str]:
        return [u for u in self.requests
                if not u.startswith((self.base, "data:", "blob:"))]


def attach(page, base: str) -> PageLog:
    """Record console messages, page errors, requests and failures of `page` (and its workers)."""
    log = PageLog(base)
    page.on("console", lambda m: log.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: log.console.append(("pageerror", str(e))))
    page.on("request", lambda r: log.requests.append(r.url))
    page.on("requestfailed", lambda r: log.failed.append((r.url, r.failure or "")))
    page.on("response", lambda r: log.failed.append((r.url, str(r.status))) if r.status >= 400 else None)

    def on_worker(worker):
        worker.on("console", lambda m: log.console.append((m.type, "[worker] " + m.text)))
    page.on("worker", on_worker)
    return log


@contextlib.contextmanager
def chromium_context(playwright, profile: Path | None = None, service_workers: str = "allow"):
    """A persistent Chromium context on a fresh (or given) profile folder; `service_workers`
    "block" keeps the guide's service worker out (then a page's routes see every request)."""
    tmp = None
    if profile is None:
        tmp = tempfile.mkdtemp(prefix="guide-chromium-")
        profile = Path(tmp)
    ctx = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=CHROME_ARGS,
        viewport={"width": 1100, "height": 900}, service_workers=service_workers)
    try:
        yield ctx
    finally:
        ctx.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def wait_async(page, js: str, timeout_s: float = 60, poll_ms: int = 200):
    """Wait until the async function `js` resolves to a truthy value (page.wait_for_function
    takes the promise itself for truthy), returning it."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate(js)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout_s} s: {js[:80]}")
        page.wait_for_timeout(poll_ms)


def wait_states(page, figure_ids: list[str], states=("live", "error"), timeout_s: float = 120) -> dict:
    """Wait until every figure's data-state is one of `states`; return {id: state}."""
    page.wait_for_function(
        """([ids, states]) => ids.every(id => states.includes(
               document.querySelector(`[data-figure="${id}"]`)?.dataset.state))""",
        arg=[figure_ids, list(states)], timeout=timeout_s * 1000, polling=50)
    return {fid: page.evaluate(STATE_JS, fid) for fid in figure_ids}
