#!/usr/bin/env python3
"""CPU time a chapter page costs the browser on a later visit, by thread, for one or more
builds of the site, alternating between them (Linux: it reads /proc).

    .venv/bin/python tests/bench_cpu.py --variant new=_site --variant old=/tmp/old/_site \\
        --pages ch04-batching.html --runs 4

On a machine with few cores a page load is CPU-bound: every thread of the browser competes
for the same cores, so the seconds until a page is live move with everything else the
machine does, while the CPU-seconds a build makes the browser spend move much less. Per page
and build: a first visit (until live, the memory snapshot kept and the offline copy saved),
then `--runs` later visits, each in a new browser on that profile. For each visit it reads the
CPU time (user + system) of every thread of the browser's processes just before the page is
opened and once every figure is live, and prints medians (min-max) in seconds of:
- live: until every figure was live (the page's clock);
- cpu: all of the browser's processes;
- main: the main threads of the page's processes (the page's: BokehJS, the previews, its scripts);
- worker: the page's Python worker (Pyodide);
- v8 bg: V8's background threads in the page's process (optimizing compilers, moving wasm
  functions to the top tier, garbage collection, code cache reads);
- page other: the page's process otherwise (compositor, IO, service worker);
- browser: the browser's own process; gpu+utility: the GPU process and utility processes
  (network, storage).

`--dwell NAME=SECONDS` keeps that variant's later visits open for SECONDS after the snapshot
was kept, as a reader who stays on the page would (the same site may be given twice, under
two names). With it, each profile first has one later visit that is not measured, with its
variant's dwell, so that every measured visit follows a later visit. What a longer visit
leaves behind is Chrome's code cache for the runtime's WebAssembly: a few seconds after its
optimizing compiler has made enough machine code for the module's hot functions, Chrome keeps
that code with the offline copy's entry, and the next page load starts with it.
It prints numbers and exits 0 unless a load fails.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.pages import read_chapters  # noqa: E402
from builder.serve import serving  # noqa: E402
from tests.bench_pages import wait_offline_saved, wait_snapshot_stored  # noqa: E402
from tests.browser import attach, chromium_context, wait_states  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
COLUMNS = ["cpu", "main", "worker", "v8 bg", "page other", "browser", "gpu+utility"]


def _stat(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            out[int(name)] = (int(_stat(f"/proc/{name}/stat")[1]), cmd)
        except OSError:
            continue
    return out


def browser_cpu(profile: Path) -> dict[str, float]:
    """CPU seconds so far of the browser using `profile` and its child processes, by COLUMNS."""
    procs = _processes()
    roots = [pid for pid, (_, cmd) in procs.items() if f"--user-data-dir={profile}".encode() in cmd
             and b"--type=" not in cmd]
    family, todo = set(roots), list(roots)
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == parent and pid not in family:
                family.add(pid)
                todo.append(pid)
    out = dict.fromkeys(COLUMNS, 0.0)
    for pid in family:
        kind = re.search(rb"--type=([a-z-]+)", procs[pid][1])
        kind = kind.group(1).decode() if kind else "browser"
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                fields = _stat(f"/proc/{pid}/task/{tid}/stat")
            except OSError:
                continue
            seconds = (int(fields[11]) + int(fields[12])) / TICK
            if kind == "renderer":
                column = ("main" if tid == str(pid) else "worker" if name.startswith("DedicatedWorker")
                          else "v8 bg" if name.startswith(("ThreadPool", "V8 DefaultWorke")) else "page other")
            else:
                column = "browser" if kind == "browser" else "gpu+utility"
            out[column] += seconds
            out["cpu"] += seconds
    return out


def first_visit(ctx, url: str, figure_ids: list[str]) -> None:
    page = ctx.new_page()
    page.goto(url)
    wait_states(page, figure_ids, timeout_s=240)
    wait_snapshot_stored(page)
    wait_offline_saved(page)
    page.close()


def later_visit(ctx, profile: Path, url: str, figure_ids: list[str], dwell_s: float = 0) -> dict:
    page = ctx.new_page()
    log = attach(page, url.rsplit("/", 1)[0] + "/")
    page.wait_for_timeout(1000)                  # the browser's own start settles
    before = browser_cpu(profile)
    page.goto(url)
    states = wait_states(page, figure_ids, timeout_s=240)
    after = browser_cpu(profile)
    timing = page.evaluate("window.__guide.timing")
    wait_snapshot_stored(page)
    if dwell_s:
        page.wait_for_timeout(dwell_s * 1000)
    page.close()
    ok = all(s == "live" for s in states.values()) and not log.errors()
    res = {k: after[k] - before[k] for k in COLUMNS}
    res.update(ok=ok, states=states, errors=log.errors(),
               live=max(timing.get(f"live:{f}", 0) for f in figure_ids) / 1e3)
    return res


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", required=True, help="NAME=SITE_DIR (one or more)")
    ap.add_argument("--pages", nargs="+", required=True, help="chapter page files")
    ap.add_argument("--runs", type=int, default=4, help="later visits per page and variant")
    ap.add_argument("--dwell", action="append", default=[], metavar="NAME=SECONDS",
                    help="keep that variant's later visits open this long after the snapshot was kept")
    a = ap.parse_args()
    if not Path("/proc/self/task").is_dir():
        print("bench_cpu.py reads /proc: Linux only", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    variants = [(v.split("=", 1)[0], Path(v.split("=", 1)[1])) for v in a.variant]
    try:
        dwell = {d.split("=", 1)[0]: float(d.split("=", 1)[1]) for d in a.dwell}
    except (IndexError, ValueError):
        ap.error("--dwell takes NAME=SECONDS")
    unknown = sorted(set(dwell) - {name for name, _ in variants})
    if unknown:
        ap.error(f"--dwell names no variant: {unknown}")
    figures = {c.file: c.figures for c in read_chapters()}
    res: dict = {}
    ok = True
    made: list[Path] = []
    with sync_playwright() as p:
        servers = [serving(site) for _, site in variants]
        bases = [s.__enter__() for s in servers]
        try:
            for page_file in a.pages:
                profiles = {}
                for (name, _), base in zip(variants, bases):
                    profiles[name] = Path(tempfile.mkdtemp(prefix="guide-cpu-")).resolve()
                    made.append(profiles[name])
                    with chromium_context(p, profiles[name]) as ctx:
                        first_visit(ctx, base + page_file, figures[page_file])
                    if dwell:                      # a later visit, not measured, with this variant's dwell
                        with chromium_context(p, profiles[name]) as ctx:
                            later_visit(ctx, profiles[name], base + page_file, figures[page_file], dwell.get(name, 0))
                for i in range(a.runs):
                    order = list(zip(variants, bases))
                    if i % 2:
                        order.reverse()
                    for (name, _), base in order:
                        with chromium_context(p, profiles[name]) as ctx:
                            r = later_visit(ctx, profiles[name], base + page_file, figures[page_file],
                                            dwell.get(name, 0))
                        res.setdefault((page_file, name), []).append(r)
                        if not r["ok"]:
                            ok = False
                            print(f"  FAILED {page_file} {name}: {r['states']} {r['errors'][:3]}")
                        else:
                            print(f"  {page_file} {name} {i + 1}: live {r['live']:.2f} s, cpu {r['cpu']:.2f} s "
                                  f"(main {r['main']:.2f}, worker {r['worker']:.2f}, v8 bg {r['v8 bg']:.2f})",
                                  flush=True)
        finally:
            for s in servers:
                s.__exit__(None, None, None)
            for prof in made:
                shutil.rmtree(prof, ignore_errors=True)
    print("\n| page | variant | visits | live s | " + " | ".join(f"{c} s" for c in COLUMNS) + " |")
    print("|---|---|---|---|" + "---|" * len(COLUMNS))
    for (page_file, name), rs in res.items():
        rs = [r for r in rs if r["ok"]]
        if rs:
            print(f"| {page_file} | {name} | {len(rs)} | {med([r['live'] for r in rs])} | "
                  + " | ".join(med([r[c] for r in rs]) for c in COLUMNS) + " |")
    return 0 if ok else 1


if __name__ == "__main__":
    from sim.cli import run       # Ctrl-C or a bad argument: one line, no traceback
    sys.exit(run(f"python {__file__}", main))
