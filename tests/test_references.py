"""References: every source in site/references.toml is cited by some chapter, every citation
names a source, and the references page of the built site has an entry for each."""
from __future__ import annotations

import re

import build

CITE = re.compile(r'cite\(\s*["\']([^"\']+)["\']')


def cited_keys() -> dict[str, set[str]]:
    """Chapter file name -> the reference keys its source cites."""
    return {c.source.name: set(CITE.findall(c.body)) for c in build.read_chapters()}


def test_every_citation_names_a_reference():
    refs = build.read_references()
    unknown = {name: sorted(keys - set(refs)) for name, keys in cited_keys().items() if keys - set(refs)}
    assert unknown == {}


def test_every_reference_is_cited_somewhere():
    cited = set().union(*cited_keys().values())
    assert sorted(set(build.read_references()) - cited) == []


def test_the_reading_list_sorts_every_source():
    """Chapter 24 says it sorts every source the guide cites by what to read next."""
    reading = next(keys for name, keys in cited_keys().items() if name.startswith("24-"))
    assert sorted(set(build.read_references()) - reading) == []


def test_references_have_text_and_a_web_address():
    for key, r in build.read_references().items():
        assert r["text"].strip() and r["url"].startswith("https://"), key


def test_references_page_lists_every_source_with_its_link(site_dir):
    html = (site_dir / "references.html").read_text()
    for key, r in build.read_references().items():
        assert f'<dt id="{key}">' in html, key
        assert f'href="{r["url"]}"' in html, key
