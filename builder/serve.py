"""The local server for the built site (build.py --serve, and the browser tests): static
files, with the build's precompressed copies (.br, .gz) sent to browsers that accept them."""
from __future__ import annotations

import contextlib
import errno
import functools
import http.server
import os
import sys
import time
from pathlib import Path

from builder.common import BuildError

# the precompressed copies the build writes, in order of preference (smaller first)
ENCODINGS = (("br", ".br"), ("gzip", ".gz"))


def coding_weights(header: str) -> dict[str, float]:
    """An Accept-Encoding header's codings (lower-case) and their q values (1 when not given)."""
    weights = {}
    for part in header.split(","):
        coding, *params = (x.strip() for x in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            weights[coding.lower()] = q
    return weights


def accepts(header: str, coding: str) -> float:
    """The q value an Accept-Encoding header gives `coding` ("x-gzip" counts as gzip; "*"
    stands for any coding not listed); 0 when refused or not accepted."""
    weights = coding_weights(header)
    names = (coding, "x-gzip") if coding == "gzip" else (coding,)
    for name in names:
        if name in weights:
            return weights[name]
    return weights.get("*", 0.0)


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip: listed (or "*" when gzip is not) with q > 0."""
    return accepts(header, "gzip") > 0


def choose_encoding(header: str, available: list[str]) -> str | None:
    """The coding to send, of the `available` copies (e.g. ["br", "gzip"]): the one the
    header weighs highest, brotli on a tie; None for the file as it is."""
    best, best_q = None, 0.0
    for coding, _ in ENCODINGS:
        q = accepts(header, coding) if coding in available else 0.0
        if q > best_q:
            best, best_q = coding, q
    return best


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """A static file handler that serves the build's precompressed copies (.br, .gz) to
    browsers that accept them, as the file's own type with Content-Encoding and Vary."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript",
                      ".json": "application/json", ".whl": "application/zip"}
    counters: dict[str, list[int]] | None = None   # path -> [requests, bytes sent], when counting

    def send_head(self):
        self.vary = False
        try:
            path = Path(self.translate_path(self.path))
            copies = {}
            # a file, or one shipped only as compressed copies (the memory snapshot's <name>.bin)
            if path.is_file() or not path.exists():
                copies = {coding: path.with_name(path.name + suffix) for coding, suffix in ENCODINGS
                          if path.with_name(path.name + suffix).is_file()}
            self.vary = bool(copies)          # this URL has more than one encoding
            coding = choose_encoding(self.headers.get("Accept-Encoding", ""), list(copies))
            if coding is None:
                return super().send_head()    # the file as it is, or 404
            stat = copies[coding].stat()
        except OSError:         # e.g. a path segment longer than the file system allows
            self.send_error(404, "File not found")
            return None
        return self.send_encoded(path, coding, copies[coding], stat)

    def send_encoded(self, path: Path, coding: str, copy: Path, stat: os.stat_result):
        """200 with the precompressed copy (or 304 if the browser has it), as the file's own type."""
        etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}-{coding}"'
        modified = self.date_time_string(int(stat.st_mtime))
        if self.headers.get("If-None-Match") == etag or (
                "If-None-Match" not in self.headers and self.headers.get("If-Modified-Since") == modified):
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return None
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", coding)
        self.send_header("Content-Length", str(stat.st_size))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", modified)
        self.end_headers()
        return open(copy, "rb")

    def end_headers(self):
        self.send_header("Cache-Control", "no-cache")    # revalidate: a rebuilt site is seen at once
        if getattr(self, "vary", False):
            self.send_header("Vary", "Accept-Encoding")
        super().end_headers()

    def copyfile(self, source, outputfile):
        n = 0
        while chunk := source.read(1 << 16):
            outputfile.write(chunk)
            n += len(chunk)
        if self.counters is not None:
            c = self.counters.setdefault(self.path.split("?")[0], [0, 0])
            c[0] += 1
            c[1] += n

    def log_message(self, *args):
        pass


class SiteServer(http.server.ThreadingHTTPServer):
    """A browser that leaves mid-response (a page closed, a fetch aborted) is not an error of
    the server: it is not printed as a traceback. Anything else still is."""

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(root: Path, port: int = 0, counters: dict | None = None):
    """Serve `root` on 127.0.0.1:`port` (0 = any free port) in a thread; yields the base URL."""
    import threading

    handler = type("Handler", (SiteHandler,), {"counters": counters})
    try:
        httpd = SiteServer(("127.0.0.1", port), functools.partial(handler, directory=str(root)))
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror})"
        raise BuildError(f"port {port} on 127.0.0.1 {why}; choose another one, e.g. PORT={port + 1} ./dev serve "
                         f"(or build.py --serve --port {port + 1})") from None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def serve_forever(out: Path, port: int) -> int:
    try:
        with serving(out, port) as url:
            print(f"serving {out} at {url}  (Ctrl-C to stop)", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    except BuildError as e:
        print(f"cannot serve: {e}", file=sys.stderr)
        return 1
    return 0
