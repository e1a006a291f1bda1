"""What every command of the guide does with bad input and interrupts: one line on
stderr, no traceback. Usage errors (a bad argument, value, path or state) exit with 2, an
interrupt with 128 + the signal's number (130 for Ctrl-C).

Standard library only: the commands of every room (build.py, `python -m widgets`,
`python -m gpu_traces.*`, `python -m sim.*`) import it, the trace recorder's Python too.

>>> quoted("9" * 100)
"'99999999999999999999999999999999999999999999999999999999999... (100 characters)"
>>> one_line("a traceback-free   message,   one line")
'a traceback-free message, one line'
>>> interrupted_status(Interrupted("SIGTERM")), interrupted_status(KeyboardInterrupt())
(143, 130)
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys

USAGE = 2                   # the exit status of a usage error, as argparse uses
LONGEST_VALUE = 60          # characters of a value quoted in a message before it is cut


class UsageError(Exception):
    """Bad input to a command; its message names what is wrong and what would be right."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as SIGINT raises KeyboardInterrupt;
    its text is the signal's name."""


def shorten(text: str, limit: int = LONGEST_VALUE) -> str:
    """`text` cut to `limit` characters (with its length said), for quoting input in a message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def quoted(value) -> str:
    """`value`'s repr for a message, cut after LONGEST_VALUE characters (then with the
    length of the value itself said)."""
    text = repr(value)
    if len(text) <= LONGEST_VALUE:
        return text
    return f"{text[:LONGEST_VALUE]}... ({len(value) if isinstance(value, str) else len(text):,} characters)"


def one_line(message: str) -> str:
    """A message as one line: newlines folded, and at most 1,000 characters."""
    line = " ".join(str(message).split())
    return line if len(line) <= 1000 else line[:997] + "..."


def fail(prog: str, message: str, status: int = USAGE) -> int:
    """Print `prog: error: message` as one line on stderr; return `status`."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr, flush=True)
    return status


def interrupted_status(exc: BaseException) -> int:
    """The exit status of an interrupt: 128 + its signal's number."""
    name = str(exc) if isinstance(exc, Interrupted) else "SIGINT"
    return 128 + int(getattr(signal.Signals, name, signal.SIGINT))


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its error as one line (and where to look for help), exit status 2."""

    def error(self, message: str):
        self.exit(USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
received: list[int] = []        # the stop signals that came inside signals_interrupt, in order


@contextlib.contextmanager
def signals_interrupt():
    """SIGINT, SIGTERM and SIGHUP raise Interrupted while inside (in the main thread), so a
    command unwinds through its `finally` blocks and cleans up as on Ctrl-C; each is noted
    in `received` (a helper process killed by the same Ctrl-C may fail before it arrives)."""
    import threading

    def interrupt(signum, frame):
        received.append(signum)
        raise Interrupted(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, interrupt) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP held back while inside (a few file moves, or a clean-up,
    that must not be cut in half); the first that came meanwhile takes effect on leaving, as
    the handler in force would have made it. Python runs signal handlers in the main thread
    whichever thread the signal reached, so the handlers themselves are swapped (blocking the
    signal in this thread, with pthread_sigmask, would not hold it back from the others)."""
    import os
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if pending:
            signum, handler = pending[0], previous[pending[0]]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


def stopped(exc: BaseException) -> int | None:
    """The signal that stopped the command, if `exc` is an interrupt or came after one."""
    if isinstance(exc, KeyboardInterrupt):
        return interrupted_status(exc) - 128
    return received[0] if received else None


def run(prog: str, main, *args, errors: tuple[type[BaseException], ...] = (UsageError,)) -> int:
    """`main(*args)`'s exit status; an exception of `errors` becomes one line and exit 2, an
    interrupt (Ctrl-C, SIGTERM, SIGHUP) one line and 128 + its signal."""
    try:
        with signals_interrupt():
            return main(*args)
    except errors as e:
        return fail(prog, str(e))
    except BaseException as e:
        signum = stopped(e)
        if signum is None:
            raise
        print(f"{prog}: interrupted ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        return 128 + signum
    except BrokenPipeError:             # `... | head`: the reader left; nothing more to say
        with contextlib.suppress(OSError):
            sys.stderr.close()
        return 1
