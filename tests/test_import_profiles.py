"""Importing published kernel profiles (vidur): real rows in, valid traces out, and every
malformed source rejected with its file, row and column, writing nothing."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpu_traces import import_profiles as imp
from gpu_traces.schema import TraceError, load_trace, validate_trace

REPO = Path(__file__).resolve().parent.parent
EXCERPT = REPO / "tests" / "fixtures" / "vidur-excerpt"
COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
DATE = "2024-11-19T13:53:02Z"
LLAMA = "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
PHI = "data/profiling/compute/a100/microsoft/phi-2/mlp.csv"
NET = "data/profiling/network/h100_dgx/all_reduce.csv"


def _run(src: Path, out: Path, *extra: str) -> int:
    return imp.main(["vidur", str(src), "--commit", COMMIT, "--commit-date", DATE,
                     "--out", str(out), *extra])


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    assert _run(EXCERPT, out, "--all-tokens") == 0
    return out


def test_excerpt_imports_to_valid_traces_with_their_source(imported):
    files = sorted(p.relative_to(imported).as_posix() for p in imported.rglob("*.json"))
    assert files == ["a100/microsoft--phi-2.json", "h100/meta-llama--Llama-2-7b-hf.json",
                     "h100/network--h100_dgx--all_reduce.json"]
    for f in files:
        t = load_trace(imported / f)                       # validates (schema and counts)
        src = t["source"]
        assert src["recorded_by_project"] is False and t["suite"]["name"] == "imported"
        assert src["repository"] == "https://github.com/microsoft/vidur"
        assert src["commit"] == COMMIT and src["licence"] == "MIT"
        assert src["units"]["time_stats.*"] == "ms (milliseconds)"
        assert t["recorded_at"] == DATE
    licence = (imported / "LICENSE.vidur").read_text()
    assert COMMIT in licence and "MIT License" in licence and "Permission is hereby granted" in licence


def test_times_are_the_source_milliseconds_in_seconds_and_shapes_come_from_the_config(imported):
    t = json.loads((imported / "h100/meta-llama--Llama-2-7b-hf.json").read_text())
    assert t["device"]["catalogue_key"] == "H100-SXM" and t["source"]["device_as_named"] == "h100"
    qkv = next(m for m in t["measurements"] if m["source_row"] == 1 and m["shape"].get("layer") == "qkv_proj")
    # row 1 of the excerpt: time_stats.attn_pre_proj.median = 0.584 ms at 4096 tokens, TP 1
    assert qkv["time"]["median_s"] == pytest.approx(0.584e-3, rel=1e-12)
    assert qkv["time"]["min_s"] == pytest.approx(0.579e-3, rel=1e-12)
    # Llama 2 7B: 32 heads of 128 (no GQA): QKV output 3 x 4096; input 4096; fp16
    assert (qkv["shape"]["m"], qkv["shape"]["n"], qkv["shape"]["k"]) == (4096, 12288, 4096)
    assert qkv["flops"] == 2.0 * 4096 * 12288 * 4096
    # the source profiles 4096 tokens twice (rows 1 and 2): the first is kept, the repeat listed
    assert t["source"]["selection"]["repeated_rows_dropped"] == [[2, 1]]
    assert "emb" in t["source"]["selection"]["ops_dropped"]


def test_phi2_keeps_only_what_the_calibration_models(imported):
    t = json.loads((imported / "a100/microsoft--phi-2.json").read_text())
    layers = {m["shape"].get("layer") for m in t["measurements"]}
    assert layers == {"qkv_proj", "o_proj", "up_proj", "down_proj"}      # GELU MLP: no gate
    up = next(m for m in t["measurements"] if m["shape"].get("layer") == "up_proj")
    assert (up["shape"]["n"], up["shape"]["k"]) == (10240, 2560)
    dropped = t["source"]["selection"]["ops_dropped"]
    assert {"input_layernorm", "mlp_act", "add"} <= set(dropped)


def test_all_reduce_sizes_are_fp16_elements(imported):
    t = json.loads((imported / "h100/network--h100_dgx--all_reduce.json").read_text())
    m = t["measurements"][0]
    assert m["shape"]["elements"] == 2048 and m["bytes"] == 4096.0
    assert m["shape"]["gpus"] == 8 and m["time"]["median_s"] == pytest.approx(0.037e-3)


def test_default_import_keeps_the_stated_token_counts(tmp_path):
    assert _run(EXCERPT, tmp_path) == 0
    t = json.loads((tmp_path / "h100/meta-llama--Llama-2-7b-hf.json").read_text())
    assert sorted({m["shape"].get("m") or m["shape"]["tokens"] for m in t["measurements"]}) == [3584, 4096]
    assert t["source"]["selection"]["token_counts_kept"] == [3584, 4096]


# ---- malformed sources: the error names file, row and column; nothing is written ---------

def _damaged(tmp_path: Path, rel: str, edit) -> Path:
    src = tmp_path / "src"
    shutil.copytree(EXCERPT, src)
    p = src / rel
    lines = p.read_text().splitlines()
    p.write_text("\n".join(edit(lines)) + "\n")
    return src


def _cell(lines: list[str], row: int, col: str, value: str) -> list[str]:
    header = lines[0].split(",")
    cells = lines[row].split(",")
    cells[header.index(col)] = value
    return lines[:row] + [",".join(cells)] + lines[row + 1:]


def _drop_column(lines: list[str], col: str) -> list[str]:
    i = lines[0].split(",").index(col)
    return [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]


@pytest.mark.parametrize("rel, edit, message", [
    (LLAMA, lambda L: _drop_column(L, "time_stats.mlp_down_proj.median"),
     rf"{LLAMA}: header: missing column time_stats\.mlp_down_proj\.median"),
    (LLAMA, lambda L: _cell(L, 3, "time_stats.attn_post_proj.median", "fast"),
     rf"{LLAMA}: row 3, column time_stats\.attn_post_proj\.median: 'fast' is not a number"),
    (LLAMA, lambda L: _cell(L, 5, "time_stats.mlp_up_proj.min", "-0.5"),
     rf"{LLAMA}: row 5, column time_stats\.mlp_up_proj\.min: '-0\.5' must be positive"),
    (LLAMA, lambda L: _cell(L, 2, "n_embd", "5120"),
     rf"{LLAMA}: row 2, column n_embd: 5120 disagrees with meta-llama/Llama-2-7b-hf's published config"),
    (NET, lambda L: _cell(L, 4, "size", "12.5"),
     rf"{NET}: row 4, column size: '12\.5' is not a whole number"),
])
def test_malformed_source_is_rejected_and_nothing_written(tmp_path, capsys, rel, edit, message):
    src = _damaged(tmp_path, rel, edit)
    out = tmp_path / "out"
    assert _run(src, out) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(message, err), err
    assert "nothing was written" in err
    assert not out.exists()


def test_unknown_model_is_rejected(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(EXCERPT, src)
    (src / "data/profiling/compute/h100/acme").mkdir()
    shutil.copytree(src / "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf",
                    src / "data/profiling/compute/h100/acme/Mystery-9B")
    out = tmp_path / "out"
    assert _run(src, out) == 2
    err = capsys.readouterr().err
    assert "data/profiling/compute/h100/acme/Mystery-9B/mlp.csv: unknown model shape 'acme/Mystery-9B'" in err
    assert not out.exists()


def test_missing_commit_is_an_error(tmp_path, capsys):
    out = tmp_path / "out"
    assert imp.main(["vidur", str(EXCERPT), "--commit-date", DATE, "--out", str(out)]) == 2
    assert "commit is unknown" in capsys.readouterr().err and not out.exists()


def test_single_files_import_with_their_repository_paths(tmp_path):
    out = tmp_path / "out"
    assert imp.main(["vidur", str(EXCERPT / NET), "--commit", COMMIT, "--commit-date", DATE,
                     "--out", str(out)]) == 0
    t = load_trace(out / "h100/network--h100_dgx--all_reduce.json")
    assert t["source"]["files"] == [NET]


def test_an_imported_trace_cannot_pass_as_a_recording(imported):
    t = json.loads((imported / "h100/network--h100_dgx--all_reduce.json").read_text())
    with pytest.raises(TraceError, match="suite.name: 'imported' exactly when the trace has a `source`"):
        validate_trace({**t, "suite": {**t["suite"], "name": "cuda"}})
    bad = {**t, "source": {**t["source"], "recorded_by_project": True}}
    with pytest.raises(TraceError, match=r"source\.recorded_by_project"):
        validate_trace(bad)


def test_shipped_imported_traces_validate_and_keep_the_licence():
    folder = REPO / "gpu_traces" / "traces" / "imported-vidur"
    files = sorted(folder.rglob("*.json"))
    assert len(files) >= 20
    assert (folder / "LICENSE.vidur").read_text().count("MIT License") == 1
    total = sum(p.stat().st_size for p in files)
    assert total < 6_000_000, f"imported traces take {total} bytes"
    for p in files[:3] + files[-3:]:
        t = load_trace(p)
        assert t["source"]["commit"] == COMMIT and t["source"]["recorded_by_project"] is False


def test_commit_is_read_from_the_checkouts_git(tmp_path):
    src = tmp_path / "checkout"
    shutil.copytree(EXCERPT, src)
    (src / ".git" / "refs" / "heads").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / ".git" / "refs" / "heads" / "main").write_text(COMMIT + "\n")
    out = tmp_path / "out"
    assert imp.main(["vidur", str(src), "--commit-date", DATE, "--out", str(out)]) == 0
    assert load_trace(out / "h100/network--h100_dgx--all_reduce.json")["source"]["commit"] == COMMIT
