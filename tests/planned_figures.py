"""Sim calls with a golden snapshot (tests/golden/<id>.json) that no widget module names yet.

Every other figure declares its sim call once, in its widget module (widgets/chNN_name.py:
COMPUTE, PARAMS). The lists here are for what has no such module, each entry
("module.function", "module.Params"), and tests/test_figure_registry.py keeps them honest:

- PLANNED: figures of chapters still being written; their sims and goldens exist, their
  widgets do not. An id must leave this list when its widget arrives (the test fails while
  a widget and an entry coexist), so the list shrinks to nothing.
- TEXT_SIMS: sim calls whose default results a chapter's prose prints (no figure of their
  own); their goldens keep those numbers from moving unnoticed.
"""
from __future__ import annotations

PLANNED: dict[str, tuple[str, str]] = {}

TEXT_SIMS: dict[str, tuple[str, str]] = {
    "ch01-sampler": ("sim.sampling.apply_sampling", "sim.sampling.SamplingParams"),        # ch01's sampling numbers
    "ch07-waste": ("sim.paging.reservation_waste", "sim.paging.WasteParams"),              # ch07's reservation waste
    "ch08-flash-decoding": ("sim.attention.split_kv_decode", "sim.attention.SplitKVParams"),  # ch08's split-KV decode
}
