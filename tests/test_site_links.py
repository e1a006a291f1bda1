"""Every link of the built site leads somewhere, and no page asks another host for anything.

Walks every href and src attribute of every page of the built site (nothing is fetched):
an internal target must be a file of the site, and its #anchor an id on that page; an
address on another host is allowed only as a plain hyperlink (<a href>) to a source listed
in site/references.toml, which a browser follows only when the reader clicks it.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import unquote, urlsplit

from builder import common

ATTR = re.compile(r'<(\w+)\b[^>]*?\s(href|src|xlink:href)="([^"]*)"', re.S)
IDS = re.compile(r'\sid="([^"]+)"')
NO_REQUEST = ("data:", "mailto:")        # inline data and mail links fetch nothing


def reference_urls() -> set[str]:
    refs = tomllib.loads((common.SITE_SRC / "references.toml").read_text())["references"]
    return {r["url"] for r in refs if r.get("url")}


def links(text: str):
    """(tag, attribute, value) of every href/src in an HTML page, tags inside attributes included."""
    for m in ATTR.finditer(text):
        yield m.group(1).lower(), m.group(2), m.group(3).replace("&amp;", "&")


def dead_links(site: Path) -> list[str]:
    pages = sorted(site.rglob("*.html"))
    ids = {p: set(IDS.findall(p.read_text())) for p in pages}
    allowed_external = reference_urls()
    problems = []
    for page in pages:
        rel = page.relative_to(site)
        for tag, attr, value in links(page.read_text()):
            if not value or value.startswith(NO_REQUEST):
                continue
            parts = urlsplit(value)
            if parts.scheme or value.startswith("//"):
                if not (tag == "a" and attr == "href" and value in allowed_external):
                    problems.append(f"{rel}: <{tag} {attr}> {value} (another host)")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_relative_to(site.resolve()) or not target.is_file():
                problems.append(f"{rel}: <{tag} {attr}> {value} (no such file)")
            elif parts.fragment and (target.suffix != ".html" or parts.fragment not in ids[target]):
                problems.append(f"{rel}: <{tag} {attr}> {value} (no such anchor)")
    return problems


def test_every_link_of_the_built_site_resolves(site_dir):
    assert dead_links(site_dir) == []


def test_the_walker_finds_dead_links(tmp_path):
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.css").write_text("")
    (tmp_path / "index.html").write_text(
        '<link rel="stylesheet" href="static/a.css"><h2 id="x">x</h2><a href="#x">ok</a>'
        '<a href="index.html#y">no anchor</a><img src="missing.png">'
        '<script src="https://cdn.example.com/x.js"></script>'
        '<a href="https://arxiv.org/abs/2309.06180">a reference</a><a href="https://example.com/">stray</a>'
        '<link rel="icon" href="data:,">')
    assert dead_links(tmp_path) == [
        "index.html: <a href> index.html#y (no such anchor)",
        "index.html: <img src> missing.png (no such file)",
        "index.html: <script src> https://cdn.example.com/x.js (another host)",
        "index.html: <a href> https://example.com/ (another host)",
    ]


def test_a_page_that_moved_sends_its_reader_on_and_the_contents_are_in_parts(site_dir):
    """The references chapter moved from 16 to 24 (after Part II): its old address is a
    page that sends the reader to the new one; the contents list the parts in order."""
    from builder.pages import MOVED, PARTS

    for old, new in MOVED.items():
        if not (site_dir / new).exists():
            continue                                  # a build of some chapters only
        text = (site_dir / old).read_text()
        assert f'<meta http-equiv="refresh" content="0; url={new}">' in text and f'href="{new}"' in text
    index = (site_dir / "index.html").read_text()
    shown = re.findall(r'<h3 class="toc-part">([^<]+)</h3>', index)
    assert shown == [title for _, title in PARTS][:len(shown)] and len(shown) >= 1
    if (site_dir / "ch17-long-context.html").exists():
        assert shown == [title for _, title in PARTS]
        part2 = index.split("Part II: at scale")[1].split("toc-part")[0]
        assert 'href="ch17-long-context.html"' in part2 and "(in preparation)" in part2
