"""The example slide deck, slides/ in the site: site/slides/ copied as is, reveal.js from
its npm package (pinned version, checked by sha256 like the Pyodide tarball) under
vendor/reveal/. Each slide embeds a figure page of this site in an iframe
(figure-<id>.html?embed=1&<control>=<value>...); the build checks that each such figure
page was written and that each control value is one the figure accepts."""
from __future__ import annotations

import io
import re
import shutil
import tarfile
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from builder import common
from builder.common import SITE_SRC, VENDOR, BuildError, check_hash, download, locked, log

REVEAL_VERSION = "6.0.2"
REVEAL_NPM = f"reveal.js@{REVEAL_VERSION}"
REVEAL_NPM_SHA256 = "2f0c20bfb02447a198a1ebe8a8c097a5437d035caa38f2820bf4ba887a3eac91"
REVEAL_FILES = ["reveal.js", "reveal.css", "theme/white.css"]   # from package/dist/ (the theme's fonts are inline)
SLIDES_SRC = SITE_SRC / "slides"
SLIDES = "slides"                                  # inside the output folder


def reveal_files() -> dict[str, bytes]:
    """REVEAL_FILES out of the pinned npm tarball (downloaded once into the cache)."""
    tgz = common.CACHE / f"reveal.js-{REVEAL_VERSION}.tgz"
    if not tgz.exists():
        download(common.CACHE, "npm", "pack", REVEAL_NPM, "--pack-destination", "{dir}", "--silent")
    data = check_hash(tgz.read_bytes(), REVEAL_NPM_SHA256, f"{tgz.name} (npm {REVEAL_NPM})")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for name in REVEAL_FILES:
            try:
                files[name] = tf.extractfile(f"package/dist/{name}").read()
            except KeyError:
                raise BuildError(f"{tgz.name}: package/dist/{name} is missing") from None
    return files


def embedded_figures(page: str) -> list[tuple[str, dict[str, str]]]:
    """(figure id, {control key: value text}) for every figure page a slide deck embeds."""
    out = []
    for src in re.findall(r'<iframe[^>]*\ssrc="([^"]+)"', page):
        url = urlsplit(src.replace("&amp;", "&"))
        m = re.fullmatch(r"(?:\.\./)?figure-([a-z0-9-]+)\.html", url.path)
        if not m:
            raise BuildError(f"site/slides: an iframe embeds {src!r}, not a figure page of this site")
        out.append((m.group(1), {k: v for k, v in parse_qsl(url.query) if k != "embed"}))
    return out


def check_embeds(page: str, built: set[str]) -> None:
    """Every embedded figure was built and accepts the control values the slide sets."""
    import widgets
    from widgets.state import apply_state, parse_value

    for fid, values in embedded_figures(page):
        if fid not in built:
            raise BuildError(f"site/slides/index.html embeds figure {fid!r}, which the build did not write")
        try:
            apply_state(widgets.build(fid), **{k: parse_value(v) for k, v in values.items()})
        except ValueError as e:
            raise BuildError(f"site/slides/index.html: {e}") from None


def build_slides(out: Path, built: set[str]) -> None:
    """The deck into out/slides/ and reveal.js into out/vendor/reveal/; skipped (with a
    note) when the build leaves out a figure the deck shows (--chapters)."""
    page = (SLIDES_SRC / "index.html").read_text()
    missing = sorted({fid for fid, _ in embedded_figures(page)} - built)
    if missing:
        log(f"slides skipped: this build leaves out {', '.join(missing)}")
        return
    check_embeds(page, built)
    reveal = out / VENDOR / "reveal"
    with locked(common.CACHE, f"the download cache {common.CACHE}"):
        files = reveal_files()
    for name, data in files.items():
        (reveal / name).parent.mkdir(parents=True, exist_ok=True)
        (reveal / name).write_bytes(data)
        log(f"npm {REVEAL_NPM}:dist/{name}", f"{VENDOR}/reveal/{name}")
    shutil.copytree(SLIDES_SRC, out / SLIDES)
    log("site/slides", f"{SLIDES}/")
