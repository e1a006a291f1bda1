"""Finding things again: the search index and the glossary (part of step 4, the pages).

- `search_index`: every section of every chapter (its heading's id, its plain text), written
  as search.json for search.html (static/search.js searches it in the browser: no server,
  and offline after one visit like every other file of the site);
- `read_glossary`: site/glossary.toml, each term with the chapter and section that teach it,
  resolved to a link (a heading that is not there fails the build);
- `link_terms`: a term's first use in each chapter's text links to its glossary entry.
"""
from __future__ import annotations

import html
import re
import tomllib

from builder import common
from builder.common import BuildError

HEADING = re.compile(r'<h([23])[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)
TAG = re.compile(r"<[^>]+>")
# where a term's first use is not linked: inside these elements
NO_LINKS = {"a", "code", "pre", "h1", "h2", "h3", "h4", "figure", "script", "style", "summary", "table", "button"}


def plain(fragment: str) -> str:
    """HTML as the text a reader sees: tags dropped, entities decoded, spaces collapsed."""
    fragment = re.sub(r"<(script|style)\b.*?</\1>", " ", fragment, flags=re.S)
    fragment = re.sub(r'<figure class="fig".*?</figure>', " ", fragment, flags=re.S)
    return " ".join(html.unescape(TAG.sub(" ", fragment)).split())


def sections(content: str) -> list[tuple[str, str, str]]:
    """(heading id, heading text, section text) of a chapter's HTML, the text before the
    first heading under the id ""."""
    marks = list(HEADING.finditer(content))
    out = [("", "", plain(content[: marks[0].start() if marks else len(content)]))]
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(content)
        out.append((m.group(2), plain(m.group(3)), plain(content[m.end():end])))
    return [s for s in out if s[1] or s[2]]


def search_index(chapters: list, contents: dict[str, str]) -> list[dict]:
    """One entry per section of every chapter: where it is, its chapter and heading, its text."""
    index = []
    for c in chapters:
        for anchor, heading, text in sections(contents[c.file]):
            index.append({"url": f"{c.file}#{anchor}" if anchor else c.file, "chapter": c.number,
                          "title": c.title, "section": heading, "text": text})
    return index


def read_glossary(chapters: list, contents: dict[str, str]) -> list[dict]:
    """site/glossary.toml's terms, sorted, each with the link to the section that teaches it."""
    path = common.SITE_SRC / "glossary.toml"
    try:
        terms = tomllib.loads(path.read_text())["term"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        raise BuildError(f"{path}: cannot be read ({e})") from None
    by_number = {c.number: c for c in chapters}
    anchors = {c.file: {heading: anchor for anchor, heading, _ in sections(contents[c.file])} for c in chapters}
    out = []
    for t in terms:
        missing = [k for k in ("id", "term", "forms", "chapter", "section", "text") if k not in t]
        if missing:
            raise BuildError(f"{path}: term {t.get('term', t)!r} lacks {', '.join(missing)}")
        c = by_number.get(t["chapter"])
        if c is None:       # a chapter left out of this build (--chapters): no entry
            continue
        if t["section"] not in anchors[c.file]:
            raise BuildError(f"{path}: {t['term']!r} is taught in chapter {c.number}, section "
                             f"{t['section']!r}, which {c.file} does not have")
        out.append(dict(t, url=f"{c.file}#{anchors[c.file][t['section']]}", chapter_title=c.title))
    return sorted(out, key=lambda t: t["term"].lower())


def link_terms(content: str, glossary: list[dict]) -> str:
    """`content` with each term's first use in running text linked to the glossary (not in
    headings, links, code, tables or figures)."""
    forms = sorted(((f, t["id"]) for t in glossary for f in t["forms"]), key=lambda x: -len(x[0]))
    if not forms:
        return content
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(f) for f, _ in forms) + r")(?![\w-])")
    term_of = dict(forms)
    done: set[str] = set()
    out, stack = [], []
    for piece in re.split(r"(<[^>]+>)", content):
        if piece.startswith("<"):
            m = re.match(r"<(/?)([a-zA-Z0-9]+)", piece)
            if m and not piece.endswith("/>"):
                name = m.group(2).lower()
                if m.group(1):
                    if name in stack:
                        del stack[len(stack) - 1 - stack[::-1].index(name):]
                elif name in NO_LINKS:
                    stack.append(name)
            out.append(piece)
            continue
        if stack:
            out.append(piece)
            continue

        def link(m: re.Match) -> str:
            term = term_of[m.group(1)]
            if term in done:
                return m.group(1)
            done.add(term)
            return f'<a class="term" href="glossary.html#{term}">{m.group(1)}</a>'
        out.append(pattern.sub(link, piece))
    return "".join(out)
