"""The example slide deck: built with the site, reveal.js from its pinned npm tarball, and
three slides embedding figure pages of this site in chosen states."""
from __future__ import annotations

import io
import tarfile

import pytest

from builder import common, slides
from builder.common import BuildError
from tests.browser import attach, wait_states


def test_deck_is_built_with_reveal_from_the_pinned_tarball(site_dir):
    assert (site_dir / "slides/index.html").read_text() == (slides.SLIDES_SRC / "index.html").read_text()
    tgz = common.CACHE / f"reveal.js-{slides.REVEAL_VERSION}.tgz"
    assert common.sha256_bytes(tgz.read_bytes()) == slides.REVEAL_NPM_SHA256
    with tarfile.open(tgz) as tf:
        for name in slides.REVEAL_FILES:
            assert (site_dir / "vendor/reveal" / name).read_bytes() == tf.extractfile(f"package/dist/{name}").read()
    page = (site_dir / "slides/index.html").read_text()
    assert "../vendor/reveal/reveal.js" in page and "://" not in page.replace("http://www.w3.org", "")


def test_deck_embeds_three_built_figures_in_valid_states(site_dir):
    embeds = slides.embedded_figures((site_dir / "slides/index.html").read_text())
    assert [fid for fid, _ in embeds] == ["ch00-decode-meter", "ch04-batch-knee", "ch06-kv-budget"]
    assert embeds[1] == ("ch04-batch-knee", {"gpu": "H200", "batch": "64"})
    for fid, _ in embeds:
        assert (site_dir / f"figure-{fid}.html").is_file()
    slides.check_embeds((site_dir / "slides/index.html").read_text(), {fid for fid, _ in embeds})


@pytest.mark.parametrize("src,message", [
    ("../figure-ch04-nope.html?embed=1", "embeds figure 'ch04-nope', which the build did not write"),
    ("../figure-ch04-batch-knee.html?embed=1&amp;batch=2000", "batch=2000 is not valid (out of range)"),
    ("../figure-ch04-batch-knee.html?embed=1&amp;gpus=H200", "has no control 'gpus'"),
    ("https://example.org/figure.html", "not a figure page of this site"),
])
def test_deck_with_a_wrong_embed_fails_the_build(src, message):
    with pytest.raises(BuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        slides.check_embeds(f'<iframe class="figure" src="{src}"></iframe>', {"ch04-batch-knee"})


def test_tampered_reveal_tarball_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE", tmp_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"window.Reveal = {};"
        info = tarfile.TarInfo("package/dist/reveal.js")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (tmp_path / f"reveal.js-{slides.REVEAL_VERSION}.tgz").write_bytes(buf.getvalue())
    with pytest.raises(BuildError, match="does not match the pinned"):
        slides.reveal_files()


@pytest.mark.browser
@pytest.mark.slow
def test_deck_shows_its_three_figures_live_in_their_states(chromium, server, site_dir):
    """Each slide's iframe (figure-<id>.html?embed=1&...) goes live at the state its address
    names: what it shows equals the figure built in CPython with those controls set."""
    import widgets
    from widgets.state import apply_state, parse_value
    from tests.figures import collect
    from tests.test_site_browser import wait_equal
    from bokeh.document import Document

    page = chromium.new_page()
    log = attach(page, server)
    try:
        page.goto(server + "slides/index.html")
        page.wait_for_function("() => window.Reveal && Reveal.isReady()")
        for i, (fid, values) in enumerate(slides.embedded_figures((site_dir / "slides/index.html").read_text())):
            page.evaluate("(i) => Reveal.slide(i)", i)
            frame = next(f for f in page.frames if f"figure-{fid}.html" in f.url)
            assert "embed=1" in frame.url
            assert wait_states(frame, [fid], ("live", "error"), timeout_s=180) == {fid: "live"}
            view = widgets.build(fid)
            root = view.layout.get_root(Document())
            apply_state(view, **{k: parse_value(v) for k, v in values.items()})
            assert values and collect(root, fid) != collect(widgets.build(fid).layout.get_root(Document()), fid)
            wait_equal(frame, fid, collect(root, fid))
        assert log.errors() == [] and log.off_site() == []
    finally:
        page.close()
