#!/usr/bin/env python3
"""Build the guide: a static site whose figures run Python in the reader's browser.

    python build.py            build into _site/
    python build.py --serve    build, then serve _site/ on http://127.0.0.1:8000/
    python build.py --export   build, then write every figure's pictures (PNG, SVG) in its
                               default and named states, and offline pages, into _exports/

The recipe, in the order `build_into` runs it (each step's module in brackets):

1. vendor_runtime       Pyodide 0.27.7 core, the wasm/pure wheels the figures import (each
   [builder.runtime]    checked by sha256), BokehJS and Panel's JS out of the same wheels,
                        all .py precompiled for CPython 3.12;
2. build_guide_wheel    the guide's own code (sim/, widgets/: pyproject.toml [tool.guide])
   [builder.wheels]     as a wheel for the browser, and the merged pyodide-lock.json; then
                        every wheel about to ship must unzip and match the lock;
   start_snapshot       Python with those wheels installed and everything the figures need
   [builder.snapshot]   imported, as a Pyodide memory snapshot made in Node, which the
                        pages' worker restores instead of booting (--no-snapshot: none);
                        its compressed copies are made on other threads during steps 3-4
                        and put in place before step 5;
3. prerender_figures    every figure the chapters place (their figure() calls) built in
   [builder.prerender]  CPython: its Bokeh document embedded in the page and an SVG poster
                        of its default state (builder.posters) painted at once;
4. render_pages         chapters, standalone figure pages, index and references (jinja2);
   [builder.pages]      the pages carry what the browser's worker needs to find the runtime;
   build_slides         the example slide deck (site/slides/) with reveal.js from npm
   [builder.slides]     (pinned, sha256-checked), embedding figure pages in chosen states;
5. write_manifest       gzip copies, then sha256 and size of every output file;
   [builder.output]
6. swap_into_place      the finished build replaces _site/ atomically.
   [builder.output]

The build is atomic (it writes into a temporary folder next to _site/ and swaps it in
only when everything succeeded; Ctrl-C, SIGTERM or SIGHUP leave the previous site, and a
build killed outright is cleaned up by the next one) and reproducible (same inputs,
byte-identical output). Downloads are cached in .cache/ and re-verified on every build;
processed wheels are cached with the sha256 they were written with and rebuilt if they
no longer match, and no wheel ships unless it unzips and matches the lock.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from builder import common
from builder.common import OUT, VENDOR, BuildError, locked, log
from builder.output import (fault_point, precompress, recover, sibling, signals_interrupt, swap_into_place, verify_site,
                            warm_brotli, write_manifest)
from builder.pages import read_chapters, read_references, render_pages, select_chapters, table_of_contents
from builder.prerender import prerender_figures
from builder.runtime import PYODIDE_CORE_SHA256, vendor_runtime
from builder.serve import serve_forever
from builder.slides import build_slides
from builder.snapshot import start_snapshot
from builder.wheels import build_guide_wheel, check_shipped_wheels
from sim.cli import ArgumentParser, UsageError, fail, interrupted_status, one_line, shorten, stopped


def build_into(staging: Path, pyodide_dir: Path | None, only: list[int] | None, snapshot: bool = True) -> None:
    """Steps 1-5 into `staging`."""
    with locked(common.CACHE, f"the download cache {common.CACHE}"):
        runtime = vendor_runtime(staging, pyodide_dir)
    build_guide_wheel(staging, runtime)
    check_shipped_wheels(staging)
    warm_brotli(staging / VENDOR)
    end_snapshot = None
    if snapshot:
        # (its brotli copies take minutes: made on other threads while the pages are built)
        runtime.snapshot, end_snapshot = start_snapshot(staging, PYODIDE_CORE_SHA256["pyodide.asm.wasm"])
    else:
        log("WARNING: --no-snapshot: no Pyodide memory snapshot; every page boots Python normally "
            "(several seconds slower per page)")
    try:
        chapters = read_chapters()
        contents = table_of_contents(chapters)
        chapters = select_chapters(chapters, only)
        references = read_references()
        figures = prerender_figures([f for c in chapters for f in c.figures], runtime)
        render_pages(staging, chapters, figures, references, runtime, contents)
        build_slides(staging, set(figures))
    except BaseException:
        if end_snapshot:
            end_snapshot(abort=True)
        raise
    if end_snapshot:
        end_snapshot()
    precompress(staging)
    write_manifest(staging)


def build(out: Path, pyodide_dir: Path | None = None, only: list[int] | None = None, snapshot: bool = True) -> None:
    """Run the whole recipe into a staging folder, then swap it in. Ctrl-C, SIGTERM or
    SIGHUP at any point leaves the previous site as it was and no staging folder behind."""
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    common.CACHE.mkdir(parents=True, exist_ok=True)
    with signals_interrupt():
        with locked(out.parent, f"{out}"):
            recover(out)
        staging = sibling(out, "tmp")
        try:
            staging.mkdir()
            fault_point("started")
            build_into(staging, pyodide_dir, only, snapshot)
            fault_point("staged")
            with locked(out.parent, f"{out}"):
                swap_into_place(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    log(f"built {out} in {time.perf_counter() - t0:.1f} s")


def figure_ids(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def chapter_numbers(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shorten(text)!r} is not a list of chapter numbers, e.g. 3,4") from None


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyodide-dir", type=Path, help="an official Pyodide 0.27.7 release folder "
                    "to take the core and wasm wheels from, instead of npm/PyPI")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder (default _site/)")
    ap.add_argument("--serve", action="store_true", help="serve the site after building")
    ap.add_argument("--no-build", action="store_true", help="with --serve or --export: use the existing build")
    ap.add_argument("--verify", action="store_true", help="check an existing build against its MANIFEST.json")
    ap.add_argument("--export", action="store_true", help="also write the figures' pictures (PNG at 2x, SVG) "
                    "in their default and named states and self-contained pages (builder.export)")
    ap.add_argument("--export-dir", type=Path, default=None, help="where --export writes (default _exports/); "
                    "a folder that is new, empty or holds an earlier export")
    ap.add_argument("--figures", type=figure_ids, default=None, help="with --export: only these figure ids, "
                    "e.g. ch04-batch-knee,ch05-load (default: every figure)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
    ap.add_argument("--no-snapshot", action="store_true", help="make no Pyodide memory snapshot (needs no "
                    "Node.js; every page then boots Python and imports its packages, several seconds slower)")
    ap.add_argument("--chapters", type=chapter_numbers,
                    help="build only these chapter numbers, e.g. 3,4 (for working on a chapter)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if args.verify:
        problems = verify_site(out)
        print("\n".join(problems) if problems else f"{out}: every file matches MANIFEST.json")
        return 1 if problems else 0
    if args.figures is not None and not args.export:
        ap.error("--figures is for --export")
    if not args.no_build:
        try:
            build(out, args.pyodide_dir, args.chapters, snapshot=not args.no_snapshot)
        except BuildError as e:
            print(f"build failed: {one_line(str(e))} (the previous site in {out} is unchanged)", file=sys.stderr)
            return 1
        except KeyboardInterrupt as e:
            status = interrupted_status(e)
            print(f"build interrupted ({signal.Signals(status - 128).name}); the previous site in {out} is "
                  f"unchanged", file=sys.stderr)
            return status
    if args.export:
        status = export(args.export_dir, args.figures)
        if status:
            return status
    if args.serve:
        return serve_forever(out, args.port)
    return 0


def export(export_dir: Path | None, ids: list[str] | None) -> int:
    """`--export`: exit 0; 2 for a folder or figure id it cannot use, 1 for an export that
    failed, 128 + the signal when stopped; one line on stderr for each but success."""
    from builder.export import EXPORTS, export_figures

    folder = (export_dir or EXPORTS).resolve()
    prog = "build.py --export"
    with signals_interrupt():
        try:
            export_figures(folder, ids)
        except UsageError as e:
            return fail(prog, str(e))
        except BuildError as e:
            return fail(prog, f"{e} ({folder} is as it was)", status=1)
        except BaseException as e:          # a stop; Chromium's driver may die of the same Ctrl-C first
            signum = stopped(e)
            if signum is None:
                raise
            what = "holds the new export, whole" if getattr(e, "export_placed", False) else "is as it was"
            print(f"{prog}: interrupted ({signal.Signals(signum).name}); {folder} {what}", file=sys.stderr)
            # the folder is settled and the staging folder gone; what is left would only print
            # noise at exit (Playwright's futures, failed with the driver the same Ctrl-C ended)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
