"""The rooms import downward only: no module of sim/, builder/, widgets/ or gpu_traces/
imports, directly or through others, a module that imports it back, and no module is
past MAX_LINES (ARCHITECTURE.md, "The rooms and the flow").

Every import counts, at the top of a module or inside a function, under TYPE_CHECKING
too: a circle only some code paths take is still one idea split in the wrong place."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("sim", "builder", "widgets", "gpu_traces")
MAX_LINES = 600
NEEDS_TORCH = {"gpu_traces.record", "gpu_traces.harness", "gpu_traces.kernels", "gpu_traces.suites",
               "gpu_traces.steps"}


def modules() -> dict[str, Path]:
    found = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def imports_of(name: str, path: Path) -> set[str]:
    """The project modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of `graph` once, as a path that returns to its first module."""
    found, done = [], set()

    def visit(node, stack, on_stack):
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in done:
                stack.append(nxt)
                on_stack.add(nxt)
                visit(nxt, stack, on_stack)
                on_stack.discard(stack.pop())
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            visit(start, [start], {start})
    return found


def test_the_walk_finds_a_circle_when_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    assert len(MODULES) > 60 and GRAPH["sim.calibration"] >= {"sim.kernel_model", "sim.provenance"}
    assert cycles(GRAPH) == []


def test_sim_imports_only_sim():
    """sim/ runs in the browser and in the recorder's Python: it needs nothing of the others."""
    for name, deps in GRAPH.items():
        if name.startswith("sim"):
            assert {d.split(".")[0] for d in deps} <= {"sim"}, (name, deps)


@pytest.mark.parametrize("name", sorted(set(MODULES) - NEEDS_TORCH - {"widgets.app"}))
def test_every_module_imports(name):
    importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_past_the_size_where_it_stays_readable(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)}: {lines} lines; split it along its seams"
