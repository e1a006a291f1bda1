"""Finding things again: search.html finds a section of every chapter, the glossary links
each term to the section that teaches it, and a term's first use in a chapter links to the
glossary (once per chapter, never inside a heading, a link or code)."""
from __future__ import annotations

import json
import re
import urllib.parse

import pytest

from builder.search import link_terms, plain, sections
from tests.conftest import SITE, built_chapters

CHAPTERS = built_chapters()


def ids_in(page: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', (SITE / page).read_text()))


def test_every_glossary_entry_links_a_heading_that_exists(site_dir):
    page = (site_dir / "glossary.html").read_text()
    entries = re.findall(r'<dt id="([^"]+)">.*?<a class="taught" href="([^"#]+)#([^"]+)">', page, re.S)
    assert len(entries) >= 25
    for term, chapter, anchor in entries:
        assert anchor in ids_in(chapter), (term, chapter, anchor)


def test_a_terms_first_use_in_a_chapter_links_to_the_glossary_once(site_dir):
    glossary = ids_in("glossary.html")
    linked_chapters = 0
    for c in CHAPTERS:
        text = (site_dir / c["file"]).read_text()
        links = re.findall(r'<a class="term" href="glossary.html#([^"]+)">', text)
        assert len(links) == len(set(links)), c["file"]
        assert set(links) <= glossary, c["file"]
        linked_chapters += bool(links)
    assert linked_chapters >= 12
    ch05 = (site_dir / "ch05-latency.html").read_text()
    assert re.search(r'<a class="term" href="glossary.html#ttft">TTFT</a>', ch05)


def test_terms_are_not_linked_inside_headings_links_or_code():
    html = ('<h2 id="x">KV cache</h2><p>See <a href="y">KV cache</a> and <code>KV cache</code>, '
            'then the KV cache itself, and the KV cache again.</p>')
    got = link_terms(html, [{"id": "kv-cache", "forms": ["KV cache"]}])
    assert got.count('class="term"') == 1
    assert '<h2 id="x">KV cache</h2>' in got and '<a href="y">KV cache</a>' in got and "<code>KV cache</code>" in got
    assert 'then the <a class="term" href="glossary.html#kv-cache">KV cache</a> itself' in got


def test_the_index_has_a_section_of_every_chapter(site_dir):
    index = json.loads((site_dir / "search.json").read_text())
    assert {e["chapter"] for e in index} == {c["number"] for c in CHAPTERS}
    assert "search.json" in json.loads((site_dir / "MANIFEST.json").read_text())["files"]   # offline too
    for e in index:
        page, _, anchor = e["url"].partition("#")
        assert not anchor or anchor in ids_in(page), e["url"]
    assert sections('<p>a</p><h2 id="b">B</h2><p>c &amp; d</p>') == [("", "", "a"), ("b", "B", "c & d")]
    assert plain('<p>x <figure class="fig">poster</figure> y</p>') == "x y"


@pytest.mark.browser
def test_search_finds_a_section_of_every_chapter(chromium, server):
    """For each chapter, the words of one of its headings find that section."""
    index = json.loads((SITE / "search.json").read_text())
    page = chromium.new_page()
    try:
        for c in CHAPTERS:
            entry = next(e for e in index if e["chapter"] == c["number"] and e["section"])
            page.goto(server + "search.html?q=" + urllib.parse.quote(entry["section"]))
            page.wait_for_function("() => document.querySelector('.search-said').textContent !== ''")
            found = page.evaluate("() => [...document.querySelectorAll('.search-results a')].map(a => a.getAttribute('href'))")
            assert entry["url"] in found[:5], (entry["section"], found[:5])
        page.goto(server + "search.html?q=" + urllib.parse.quote("zzzz-nothing"))
        page.wait_for_function("() => document.querySelector('.search-said').textContent !== ''")
        assert "Nothing found" in page.text_content(".search-said")
    finally:
        page.close()
