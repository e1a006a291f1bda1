"""python -m widgets serve ID [STATE] [key=value ...] [--port N] [--show]

Serves one figure with `panel serve`: the figure's Python runs in a server-side kernel
(CPython), so it needs no site build and no Pyodide. STATE is one of the figure's named
states; key=value pairs set controls (e.g. gpu=H200 batch=64).

python -m widgets list     the figure ids and their named states
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import widgets
from sim.cli import ArgumentParser, UsageError, run

PROG = "python -m widgets"


def main(argv: list[str] | None = None) -> int:
    return run(PROG, command, argv, errors=(UsageError, ValueError))


def command(argv: list[str] | None) -> int:
    """A bad figure id, state or value raises ValueError (one line and exit 2 through `run`)."""
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve one figure with panel serve")
    serve.add_argument("figure", help=f"one of: {', '.join(widgets.FIGURES)}")
    serve.add_argument("settings", nargs="*", help="[STATE] [key=value ...]")
    serve.add_argument("--port", type=int, default=5006)
    serve.add_argument("--address", default="127.0.0.1")
    serve.add_argument("--show", action="store_true", help="open it in a browser")
    sub.add_parser("list", help="figure ids and their named states")
    args = ap.parse_args(argv)
    if args.command == "list":
        for fid in widgets.FIGURES:
            print(fid, *widgets.states(fid))
        return 0
    from widgets.app import parse
    figure_id, state, values = parse([args.figure, *args.settings])
    widgets.figure(figure_id, state, **values)      # a bad id, state or value fails here, not in the server
    root = str(Path(widgets.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "panel", "serve", str(Path(widgets.__file__).with_name("app.py")),
           "--port", str(args.port), "--address", args.address,
           "--allow-websocket-origin", f"{args.address}:{args.port}", "--allow-websocket-origin", f"localhost:{args.port}",
           *(["--show"] if args.show else []), "--args", figure_id, *args.settings]
    server = subprocess.Popen(cmd, env=env)
    # Stopping this process stops the server: a terminate (a process manager, a test) would
    # otherwise leave `panel serve` running on its port. Ctrl-C reaches both already.
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda signum, frame: server.terminate())
    try:
        rc = server.wait()
    except KeyboardInterrupt:
        server.wait()
        return 130
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
