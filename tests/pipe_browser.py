"""Headless Chromium driven over the DevTools protocol on a pipe, with no protocol domain
enabled, for the benchmarks' timed page loads.

Playwright attaches to every worker a page starts and enables the Runtime domain in it
(it reports their console messages). An inspected thread does work a reader's browser does
not: V8 then records line and column numbers for the stack traces it captures, and a
function's line numbers are worked out by parsing it again when first needed. Pyodide's
runtime is one function of 1.2 MB (`pyodide.asm.js`): in devtools traces of a later visit
to ch12, the Python worker spent 140 ms in `V8.CollectSourcePositions` with Playwright
attached (117 ms of it in one go, parsing that function again) and 20 ms without, and was
busy 0.80 s against 0.58 s before the page went live. Timed both ways, alternating
(BENCHMARKS.md, Timing without an inspector), pages went live up to 0.4 s sooner without
the inspector, some no sooner. So the benchmarks time page loads through this driver: it
attaches to the page alone and only evaluates expressions in it (`Runtime.evaluate` needs
no domain enabled); the page's own marks (`window.__guide.timing`) give the times.

The browser runs with `tests.browser.CHROME_ARGS` (nothing leaves the machine) plus the
switches Playwright starts Chromium with that bear on a page's timing (no throttling of
timers or renderers, the same colour profile and features), and the same window size as
`tests.browser.chromium_context`, on a profile folder that Playwright contexts may use
before or after it (not at the same time).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
import json
import os
import select
import time
from pathlib import Path

from tests.browser import CHROME_ARGS, CHROMIUM, PageLog

# What Playwright adds that changes how a page runs (playwright-core chromiumSwitches and
# its headless switches); its switches for updaters, sign-in and crash reports are moot here.
PLAYWRIGHT_LIKE_ARGS = [
    "--disable-field-trial-config", "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows", "--disable-renderer-backgrounding",
    "--disable-back-forward-cache", "--disable-dev-shm-usage", "--disable-hang-monitor",
    "--disable-ipc-flooding-protection", "--disable-popup-blocking", "--force-color-profile=srgb",
    "--no-service-autorun", "--password-store=basic", "--use-mock-keychain", "--hide-scrollbars",
    "--mute-audio", "--disable-features=PaintHolding,ThirdPartyStoragePartitioning,MediaRouter,"
    "OptimizationHints,HttpsUpgrades",
]
WINDOW = (1100, 900)   # tests.browser.chromium_context's viewport


@dataclass(frozen=True)
class Device:
    """What a page is shown on: its viewport, and for a phone its CPU slowed down and touch."""

    width: int = WINDOW[0]
    height: int = WINDOW[1]
    scale: float = 1.0
    mobile: bool = False
    cpu_slowdown: float = 1.0      # DevTools' CPU throttling rate (4: a quarter of this machine)


DESKTOP = Device()
# a current phone: 390 x 844 CSS px at 3x, its CPU taken as a quarter of this machine's (the
# "4x slowdown" profile of Chrome's DevTools for a mid-range phone), touch events
PHONE = Device(390, 844, 3.0, True, 4.0)


class ProtocolError(RuntimeError):
    """The browser answered a command with an error, or went away."""


class PipeBrowser:
    """One Chromium process on `profile`, its DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, profile: Path, timeout_s: float = 60, device: Device = DESKTOP):
        self.timeout_s = timeout_s
        self.device = device
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        args = [CHROMIUM, *CHROME_ARGS, *PLAYWRIGHT_LIKE_ARGS, "--remote-debugging-pipe",
                f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"]
        actions = [(os.POSIX_SPAWN_DUP2, to_chrome_r, 3), (os.POSIX_SPAWN_DUP2, from_chrome_w, 4),
                   (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
        self.pid = os.posix_spawn(CHROMIUM, args, os.environ, file_actions=actions)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._out, self._in = to_chrome_w, from_chrome_r
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []      # events of attached sessions, as they came

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._out, data):]
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            m = self._recv(deadline, method)
            if m.get("id") == self._id:
                if "error" in m:
                    raise ProtocolError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def _recv(self, deadline: float, what: str) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError(f"no answer from Chromium to {what}")
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise ProtocolError(f"Chromium closed its DevTools pipe (waiting for {what})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def new_page(self) -> PipePage:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        d = self.device
        self.send("Emulation.setDeviceMetricsOverride", {"width": d.width, "height": d.height,
                                                         "deviceScaleFactor": d.scale, "mobile": d.mobile}, session)
        if d.mobile:
            self.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5}, session)
        if d.cpu_slowdown != 1:
            self.send("Emulation.setCPUThrottlingRate", {"rate": d.cpu_slowdown}, session)
        return PipePage(self, target, session)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", timeout_s=10)
        for _ in range(200):
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        os.close(self._out)
        os.close(self._in)


class PipePage:
    """A tab: the calls the benchmarks make on a Playwright page, over the pipe."""

    def __init__(self, browser: PipeBrowser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session

    def goto(self, url: str, timeout_s: float = 60) -> None:
        """Navigate, and wait for the new document's load event (as Playwright's goto)."""
        r = self.browser.send("Page.navigate", {"url": url}, self.session)
        if r.get("errorText"):
            raise ProtocolError(f"{url}: {r['errorText']}")
        self.wait_for("location.href !== 'about:blank' && document.readyState === 'complete'",
                      timeout_s=timeout_s, poll_ms=20)

    def evaluate(self, js: str, arg=None, timeout_s: float | None = None):
        """The value of the expression `js` (a function is called with `arg`), awaited if a
        promise, as JSON."""
        # as Playwright's page.evaluate: an expression that is a function is called with `arg`
        src = f"(() => {{ const v = ({js}\n); return typeof v === 'function' ? v({json.dumps(arg)}) : v; }})()"
        r = self.browser.send("Runtime.evaluate", {"expression": src, "returnByValue": True, "awaitPromise": True},
                              self.session, timeout_s=timeout_s)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise ProtocolError(f"evaluate failed: {(d.get('exception') or {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait_for(self, js: str, arg=None, timeout_s: float = 120, poll_ms: int = 50):
        """The first truthy value of `js` (as evaluate), polled every poll_ms."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(js, arg)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true within {timeout_s} s: {js[:80]}")
            time.sleep(poll_ms / 1000)

    def wait_for_function(self, js: str, arg=None, timeout: float = 30000, polling="raf"):
        """Playwright's page.wait_for_function (timeout and polling in ms, "raf" as 16 ms),
        returning the first truthy value itself; a promise is awaited, not taken for truthy."""
        return self.wait_for(js, arg, timeout_s=timeout / 1000, poll_ms=16 if polling == "raf" else polling)

    def wait_for_timeout(self, ms: float) -> None:
        time.sleep(ms / 1000)

    def console_errors(self) -> list[tuple[str, str]]:
        """The page's console errors and uncaught exceptions so far (its main thread: the
        inspector keeps them and reports them once Runtime is enabled). Call it after the
        timed part: from here on the page runs inspected."""
        b = self.browser
        seen = len(b.events)
        b.send("Runtime.enable", session=self.session)
        b.send("Runtime.disable", session=self.session)
        out = []
        for m in b.events[seen:]:
            if m.get("sessionId") != self.session:
                continue
            p = m.get("params", {})
            if m["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(("error", " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
            elif m["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(("pageerror", (d.get("exception") or {}).get("description") or d.get("text", "")))
        return out

    def resources(self) -> list[str]:
        """Every URL the page's main thread fetched (its resource timing entries)."""
        return self.evaluate("[location.href, ...performance.getEntriesByType('resource').map(e => e.name)]")

    def log(self, base: str) -> PageLog:
        """A tests.browser.PageLog of what the page's main thread said and fetched so far
        (console_errors and resources: call it after the timed part)."""
        return PageLog(base, console=self.console_errors(), requests=self.resources())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.browser.send("Target.closeTarget", {"targetId": self.target}, timeout_s=10)


@contextlib.contextmanager
def pipe_browser(profile: Path, timeout_s: float = 60, device: Device = DESKTOP):
    b = PipeBrowser(profile, timeout_s, device)
    try:
        yield b
    finally:
        b.close()

