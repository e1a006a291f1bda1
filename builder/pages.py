"""Step 4, the pages: chapters (TOML front matter, then Markdown with jinja macros and sim
calls), one page per figure, the index, the references, and chapters.json. A chapter's
figures are the figure() calls in its text, in the order they appear."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from builder import common
from builder.common import GUIDE_PACKAGE, LOCK_FILE, PANEL_CDN_ROOT, PYO, ROOT, VENDOR, BuildError, log, sha256_file
from builder.prerender import Prerendered
from builder.runtime import BOKEH_JS, Runtime
from builder.search import link_terms, read_glossary, search_index

MACROS = '{% from "macros.html" import figure, cite, takeaway, question with context %}'


@dataclass
class Chapter:
    number: int
    title: str
    summary: str                 # what it covers, one line (the contents table of chapter 0)
    slug: str
    figures: list[str]           # the ids its figure() calls place, in order of appearance
    source: Path
    body: str
    body_line: int = 1                  # line of the source file where `body` starts
    prev: "Chapter | None" = None
    next: "Chapter | None" = None

    @property
    def file(self) -> str:
        return f"{self.slug}.html"


SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")   # a chapter's file name: letters, digits, hyphens

# The guide's parts: (first chapter number, heading) in order; a chapter belongs to the
# last part whose first number is not above its own. The references close the guide.
PARTS = ((0, "Part I: one GPU"), (17, "Part II: at scale"), (24, "Further reading"))

# Pages that moved: the old address -> the page it is now (a small page that sends the
# reader on, so links and bookmarks to the old address keep working).
MOVED = {"ch16-references.html": "ch24-references.html"}


def moved_page(new: str) -> str:
    """A page that sends its reader to `new` (a page of the site that took its place)."""
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Moved to {new}</title>'
            f'<meta http-equiv="refresh" content="0; url={new}"><link rel="canonical" href="{new}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"></head>\n'
            f'<body><main><p>This page is now <a href="{new}">{new}</a>.</p></main></body></html>\n')


def part_of(number: int) -> str:
    """The heading of the part chapter `number` belongs to.

    >>> part_of(4), part_of(17), part_of(24)
    ('Part I: one GPU', 'Part II: at scale', 'Further reading')
    """
    return [title for first, title in PARTS if first <= number][-1]


def read_chapter(path: Path) -> Chapter:
    """One chapter source: TOML front matter between +++ lines (number, title, summary,
    slug), then Markdown with jinja macros; its figures are those its figure() calls place."""
    text = path.read_text()
    m = re.match(r"\+\+\+\n(.*?)\n\+\+\+\n", text, re.S)
    if not m:
        raise BuildError(f"{path}: no TOML front matter between +++ lines")
    body, body_line = text[m.end():], text[:m.end()].count("\n") + 1
    try:
        meta = tomllib.loads(m.group(1))
        if "figures" in meta:
            raise BuildError(f"{path}: front matter lists `figures`; delete that line: the build takes a "
                             f"chapter's figures from its figure() calls, in the order they appear")
        c = Chapter(int(meta["number"]), meta["title"], meta["summary"], meta["slug"],
                    placed_figures(path, body, body_line), path, body, body_line=body_line)
    except KeyError as exc:
        raise BuildError(f"{path}: front matter lacks {exc} (number, title, summary and slug are required)") from None
    except (tomllib.TOMLDecodeError, ValueError, TypeError) as exc:
        raise BuildError(f"{path}: bad front matter: {exc}") from None
    if not isinstance(c.slug, str) or not SLUG.fullmatch(c.slug):
        raise BuildError(f"{path}: slug {c.slug!r} must be lower-case letters, digits and hyphens "
                         f"(it names the page's file)")
    return c


def source_line(path: Path, body_line: int, line: int | None) -> str:
    """`path:line` of a line of a chapter's body (path relative to the repository if inside it)."""
    where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    return where + (f":{body_line + line - 1}" if line else "")


def placed_figures(path: Path, body: str, body_line: int = 1) -> list[str]:
    """The figures a chapter's body places: the ids of its figure() calls, in order of
    appearance. Each must be a literal string naming a module of widgets/, placed once."""
    import jinja2
    from jinja2 import nodes

    import widgets

    try:
        tree = jinja2.Environment().parse(body)
    except jinja2.TemplateSyntaxError as exc:
        raise BuildError(f"{source_line(path, body_line, exc.lineno)}: TemplateSyntaxError: {exc}") from None
    calls = [c for c in tree.find_all(nodes.Call) if isinstance(c.node, nodes.Name) and c.node.name == "figure"]
    first: dict[str, int] = {}
    for call in sorted(calls, key=lambda c: c.lineno):
        at = source_line(path, body_line, call.lineno)
        arg = call.args[0] if call.args else next((k.value for k in call.kwargs if k.key == "id"), None)
        if not (isinstance(arg, nodes.Const) and isinstance(arg.value, str)):
            raise BuildError(f"{at}: figure() must name its figure with a literal string, "
                             f'e.g. figure("ch04-batch-knee")')
        fid = arg.value
        if fid in first:
            raise BuildError(f"{at}: figure {fid!r} is placed twice (also at line {first[fid]}); "
                             f"a chapter places each figure once")
        if fid not in widgets.FIGURES:
            raise BuildError(f"{at}: unknown figure {fid!r}: no module widgets/{fid.replace('-', '_')}.py "
                             f"(known: {', '.join(widgets.FIGURES)})")
        first[fid] = body_line + call.lineno - 1
    return list(first)


def read_chapters() -> list[Chapter]:
    """Every chapter, in order of number; numbers, slugs and placed figures are unique."""
    chapters = [read_chapter(p) for p in sorted((common.SITE_SRC / "chapters").glob("*.md"))]
    placed: dict[str, Chapter] = {}
    for c in chapters:
        for fid in c.figures:
            other = placed.setdefault(fid, c)
            if other is not c:
                raise BuildError(f"{c.source}: figure {fid!r} is placed by {other.source.name} too; "
                                 f"a figure belongs to one chapter (its page links back to it)")
    for key in ("number", "slug"):
        seen: dict = {}
        for c in chapters:
            other = seen.setdefault(getattr(c, key), c)
            if other is not c:
                raise BuildError(f"{c.source}: {key} {getattr(c, key)!r} is also the {key} of {other.source.name}")
    chapters.sort(key=lambda c: c.number)
    for a, b in zip(chapters, chapters[1:]):
        a.next, b.prev = b, a
    return chapters


def table_of_contents(chapters: list[Chapter]) -> list[dict]:
    """Every chapter of the guide in order: the written ones (with their page), then the ones
    site/plan.toml lists as planned (page None). A planned number that has been written is an error."""
    planned = tomllib.loads((common.SITE_SRC / "plan.toml").read_text()).get("planned", [])
    written = {c.number for c in chapters}
    for entry in planned:
        if entry["number"] in written:
            raise BuildError(f"site/plan.toml: chapter {entry['number']} is written now; remove it from the plan")
    rows = [{"number": c.number, "title": c.title, "summary": c.summary, "file": c.file} for c in chapters]
    rows += [{"number": e["number"], "title": e["title"], "summary": e["summary"], "file": None} for e in planned]
    rows.sort(key=lambda r: r["number"])
    for i, r in enumerate(rows):          # part: its heading; part_starts: the first row of a part
        r["part"] = part_of(r["number"])
        r["part_starts"] = i == 0 or rows[i - 1]["part"] != r["part"]
    return rows


def read_references() -> dict[str, dict]:
    refs = tomllib.loads((common.SITE_SRC / "references.toml").read_text())["references"]
    return {r["key"]: r for r in refs}


def sim_namespace():
    """`sim` with every submodule imported, for numbers computed in chapter text:
    {{ "%.0f" | format(sim.roofline.ridge_point(sim.hardware.get("H100-SXM"))) }}."""
    import importlib
    import pkgutil

    import sim
    for m in pkgutil.iter_modules(sim.__path__):
        importlib.import_module(f"sim.{m.name}")
    return sim


def whole_steps() -> list[dict]:
    """The checked steps files under gpu_traces/steps/ (`gpu_traces.steps.shipped`), for
    chapter text that sets measured steps beside the model's."""
    from gpu_traces import steps
    return steps.shipped()


def template_line(exc: BaseException) -> int | None:
    """The line of the chapter template where `exc` was raised: a syntax error's own, or
    that of the innermost frame jinja maps to the template ("<template>")."""
    import traceback

    import jinja2

    if isinstance(exc, jinja2.TemplateSyntaxError):
        return exc.lineno
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<template>"]
    return lines[-1] if lines else None


def render_body(env, c: Chapter, shared: dict, contents: tuple = ()) -> str:
    """A chapter's Markdown with its macros and sim calls evaluated; the figures it places
    must be exactly its figure() calls, once each (the page loads only those)."""
    try:
        body = env.from_string(MACROS + c.body).render(**shared, contents=contents)
    except Exception as exc:
        raise BuildError(f"{source_line(c.source, c.body_line, template_line(exc))}: "
                         f"{type(exc).__name__}: {exc}") from None
    placed = re.findall(r'<figure class="fig" id="fig-[^"]*" data-figure="([^"]+)"', body)
    if placed != c.figures:
        raise BuildError(f"{c.source.name}: the text places figures {placed} but its figure() calls are "
                         f"{c.figures}; call figure() once per figure, not in a loop or another macro")
    return body


# the files Python's start needs whatever the boot: when it fails, the worker names those
# that are missing or not the build's (static/worker.js damagedFiles)
RUNTIME_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", LOCK_FILE, "python_stdlib.zip")


def runtime_files(out: Path) -> dict[str, list]:
    """{path: [bytes, sha256]} of RUNTIME_FILES as the build wrote them into `out`."""
    return {f"{PYO}/{n}": [(out / PYO / n).stat().st_size, sha256_file(out / PYO / n)] for n in RUNTIME_FILES}


def worker_config(snapshot: dict | None = None, files: dict | None = None) -> dict:
    """What the page's Python worker (static/worker.js) needs to know of the build's layout,
    written into every page with figures; the worker has no copy of its own. Paths are
    relative to the site's root. `snapshot`: the memory snapshot's files and the runtime
    build it was made by (builder.snapshot.make_snapshot), or None for the normal boot;
    `files`: the runtime's files with their sizes and hashes (runtime_files)."""
    return {"pyodide": f"{PYO}/", "module": f"{PYO}/pyodide.mjs", "lock": f"{PYO}/{LOCK_FILE}",
            "package": GUIDE_PACKAGE, "panel_cdn_root": PANEL_CDN_ROOT, "snapshot": snapshot,
            "files": files or {}}


def scrolling_tables(html_text: str) -> str:
    """Each table of the chapter's text (Markdown writes them with no attributes; a figure's
    own tables have a class) in a box of its own that scrolls sideways when the table is
    wider than the screen, so the page itself never does. The box is focusable, so a
    keyboard can scroll it too, and named for screen readers."""
    return re.sub(r"<table>(.*?)</table>",
                  lambda m: f'<div class="table-scroll" role="region" tabindex="0" aria-label="table">'
                            f"<table>{m.group(1)}</table></div>", html_text, flags=re.S)


def render_pages(out: Path, chapters: list[Chapter], figures: dict[str, Prerendered],
                 references: dict[str, dict], runtime: Runtime, contents: list[dict]) -> None:
    """Step 4: chapter pages, one page per figure, the index and the references.

    Chapter text sees `contents`, the whole guide's table of contents (`table_of_contents`)."""
    import jinja2
    import markdown

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(common.SITE_SRC / "templates"),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    shared = {"FIGURES": figures, "REFERENCES": references, "vendor": VENDOR,
              "versions": runtime.versions, "sim": sim_namespace(),
              # whole forward steps timed on a GPU (gpu_traces/steps.py), oldest first
              "STEPS": whole_steps(),
              # loaded by guide.js after the first paint, in this order
              "bokeh_scripts": [f"{VENDOR}/bokeh/{js}.min.js" for js in BOKEH_JS]
              + [f"{PANEL_CDN_ROOT}{runtime.versions['panel']}/dist/panel.min.js"],
              "worker_config": worker_config(runtime.snapshot, runtime_files(out))}
    cited: dict[str, list[Chapter]] = {}

    def write(name: str, html_text: str) -> None:
        (out / name).write_text(html_text)

    html_of: dict[str, str] = {}          # each chapter's text as HTML, before terms are linked
    for c in chapters:
        for key in re.findall(r'cite\(\s*["\']([^"\']+)["\']', c.body):
            if key not in references:
                raise BuildError(f"{c.source.name}: cites {key!r}, which is not in site/references.toml")
        body = render_body(env, c, shared, contents)
        for key in dict.fromkeys(re.findall(r'class="cite" href="references.html#([^"]+)"', body)):
            cited.setdefault(key, []).append(c)
        html_of[c.file] = scrolling_tables(markdown.markdown(
            body, extensions=["md_in_html", "tables", "attr_list", "smarty", "toc"], output_format="html"))
    glossary = read_glossary(chapters, html_of)
    for c in chapters:
        content = link_terms(html_of[c.file], glossary)
        figs = [figures[f] for f in c.figures]
        write(c.file, env.get_template("chapter.html").render(
            **shared, chapter=c, chapters=chapters, content=content, figures=figs, body_class="chapter-page",
            page_title=f"{c.number}. {c.title} · LLM inference, live"))
        log(str(c.source.relative_to(ROOT)), c.file)
        for fid in c.figures:
            write(f"figure-{fid}.html", env.get_template("figure_page.html").render(
                **shared, chapter=c, figure_id=fid, figures=[figures[fid]], body_class="figure-page",
                page_title=f"{fid}: {figures[fid].title}"))
            log(f"widgets.{fid}", f"figure-{fid}.html")
    placed = {c.file: c.figures for c in chapters}
    parts = [(row["part"], []) for row in contents if row["part_starts"]]
    for row in contents:
        if row["file"] is None or row["file"] in placed:         # (a subset build leaves chapters out)
            dict(parts)[row["part"]].append(dict(row, figures=placed.get(row["file"], [])))
    write("index.html", env.get_template("index.html").render(
        **shared, parts=[(title, rows) for title, rows in parts if rows], figures=[], body_class="index-page",
        page_title="LLM inference, live: an interactive guide"))
    log("chapters", "index.html")
    for old, new in MOVED.items():
        if (new in placed) and not (out / old).exists():
            write(old, moved_page(new))
            log("builder/pages.py MOVED", old)
    refs = [dict(r, cited_in=cited.get(k, [])) for k, r in references.items()]
    write("references.html", env.get_template("references.html").render(
        **shared, references=refs, figures=[], body_class="references-page",
        page_title="References · LLM inference, live"))
    log("site/references.toml", "references.html")
    write("glossary.html", env.get_template("glossary.html").render(
        **shared, glossary=glossary, figures=[], body_class="glossary-page",
        page_title="Glossary · LLM inference, live"))
    log("site/glossary.toml", "glossary.html")
    write("search.json", json.dumps(search_index(chapters, html_of), ensure_ascii=False) + "\n")
    write("search.html", env.get_template("search.html").render(
        **shared, figures=[], body_class="search-page", page_title="Search · LLM inference, live"))
    log("chapters", "search.json, search.html")
    listing = [{"number": c.number, "title": c.title, "file": c.file, "figures": c.figures} for c in chapters]
    write("chapters.json", json.dumps(listing, indent=1) + "\n")
    log("chapters", "chapters.json")
    static = out / "static"
    shutil.copytree(common.SITE_SRC / "static", static)
    # the service worker at the site's root, so that its scope is the whole site, told the
    # pages' classic scripts and their sha256 (it stores them at install: static/sw.js), and
    # the module the page's worker loads (Pyodide's runtime script, compiled once saved)
    (static / "sw.js").unlink()
    (out / "sw.js").write_text(service_worker(out, shared["bokeh_scripts"], [f"{PYO}/pyodide.asm.js"]))
    for p in sorted(static.rglob("*")):
        if p.is_file():
            log(str((common.SITE_SRC / "static" / p.relative_to(static)).relative_to(ROOT)),
                str(p.relative_to(out)))
    log("site/static/sw.js", "sw.js")


INSTALL_SCRIPTS = "const INSTALL_SCRIPTS = {};"
RUNTIME_MODULES = "const RUNTIME_MODULES = [];"


def service_worker(out: Path, scripts: list[str], modules: list[str] = ()) -> str:
    """site/static/sw.js with INSTALL_SCRIPTS set to `scripts` (paths under `out`) and their
    sha256, and RUNTIME_MODULES to `modules`."""
    source = (common.SITE_SRC / "static" / "sw.js").read_text()
    for line in (INSTALL_SCRIPTS, RUNTIME_MODULES):
        if source.count(line) != 1:
            raise BuildError(f"site/static/sw.js: expected the line {line!r} once")
    for path in [*scripts, *modules]:
        if not (out / path).is_file():
            raise BuildError(f"{path}: a page script the service worker is to store is not in the build")
    digests = {path: hashlib.sha256((out / path).read_bytes()).hexdigest() for path in scripts}
    return (source.replace(INSTALL_SCRIPTS, f"const INSTALL_SCRIPTS = {json.dumps(digests, indent=1)};")
            .replace(RUNTIME_MODULES, f"const RUNTIME_MODULES = {json.dumps(list(modules))};"))


def select_chapters(chapters: list[Chapter], only: list[int] | None) -> list[Chapter]:
    """The chapters numbered in `only` (all if None), linked to each other in order."""
    if only:
        chapters = [c for c in chapters if c.number in only]
        for a, b in zip(chapters, chapters[1:]):
            a.next, b.prev = b, a
        if chapters:
            chapters[0].prev = chapters[-1].next = None
    return chapters
