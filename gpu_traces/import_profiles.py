"""Import published GPU kernel profiles into the trace schema (imported, never relabelled).

    python -m gpu_traces.import_profiles vidur CHECKOUT [--commit SHA] [--commit-date ISO]
    python -m gpu_traces.import_profiles vidur FILE.csv ... --commit SHA --commit-date ISO

`vidur` reads the profiles of microsoft/vidur (MIT licence), recorded by its authors with
torch/CUDA kernels on NVIDIA GPUs:

* `data/profiling/compute/<device>/<org>/<model>/mlp.csv`: one row per (token count,
  tensor-parallel degree) with the min/max/mean/median/std in milliseconds of each op of
  one transformer block in fp16 (the `time_stats.<op>.<stat>` columns), timed as the sum
  of the CUDA kernels the op launched (torch profiler);
* `data/profiling/network/<topology>/{all_reduce,send_recv}.csv`: one row per (message
  size in fp16 elements, GPU count) with the same statistics.

Each source file becomes one trace under `--out` (default gpu_traces/traces/imported-vidur/)
with a `source` block: repository, commit, file, licence, the original columns and their
units, the device as the source names it, how it was timed, and which rows and ops were
kept. The licence notice is copied next to the traces. Times are converted to seconds and
nothing else: no timing is edited. Every source row is checked (columns present, numbers
numeric and positive, the model's shape equal to its published config); any problem stops
the import with the file, row and column, and nothing is written.

The kernels' shapes come from the models' published configs in PROFILED_MODELS (one
place, gpu_traces/vidur_source.py, with the source's names and columns), checked against
the shape columns each row carries.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from gpu_traces import shapes
from gpu_traces.schema import SCHEMA_VERSION, TraceError, validate_trace
from sim import hardware
from gpu_traces.vidur_source import (DROPPED_OPS, FP16_BYTES, GEMM_OPS, KEPT_SIZE_TARGETS, KEPT_TOKENS,  # noqa: F401
                                     LICENCE_COPY, LICENCE_NAME, NETWORK_COLUMNS, NETWORK_DEVICE, NORM_OPS,
                                     PROFILED_MODELS, SHAPE_COLUMNS, VIDUR_DEVICES, VIDUR_REPEATS,
                                     VIDUR_REPOSITORY, ImportError_, ProfiledModel, _number, _read_csv,
                                     _stat_columns, _time)
from sim.cli import ArgumentParser, run

DEFAULT_OUT = Path(__file__).resolve().parent / "traces" / "imported-vidur"
IMPORTER = "python -m gpu_traces.import_profiles vidur"
# ------------------------------------------------------------------------------------
# Compute profiles (mlp.csv)
# ------------------------------------------------------------------------------------

COMPUTE_PATH = re.compile(r"data/profiling/compute/(?P<device>[^/]+)/(?P<model>[^/]+/[^/]+)/mlp\.csv$")
NETWORK_PATH = re.compile(r"data/profiling/network/(?P<topology>[^/]+)/(?P<op>all_reduce|send_recv)\.csv$")


def _check_model(row: dict, model: ProfiledModel, name: str, display: str, i: int) -> None:
    want = {"n_head": model.heads, "n_kv_head": model.kv_heads, "n_embd": model.hidden,
            "n_expanded_embd": model.ffn}
    for col, value in want.items():
        got = _number(row, col, display, i, integer=True)
        if got != value:
            raise ImportError_(f"{display}: row {i}, column {col}: {got} disagrees with {name}'s "
                               f"published config ({value}, {model.config})")
    gated = row["use_gated_mlp"].strip()
    if gated not in ("True", "False") or (gated == "True") != model.gated:
        raise ImportError_(f"{display}: row {i}, column use_gated_mlp: {gated!r} disagrees with "
                           f"{name}'s published config ({model.gated})")


def _label_model(name: str) -> str:
    return name.split("/")[-1].lower()


def compute_measurements(rows: list[dict], model_name: str, display: str,
                         tokens_kept: Sequence[int] | None) -> tuple[list[dict], dict]:
    """Measurements of one mlp.csv, and the `selection` record saying what was kept."""
    model = PROFILED_MODELS[model_name]
    short = _label_model(model_name)
    out = []
    seen_tokens, seen_tp = set(), set()
    kept_rows = 0
    first_row: dict[tuple[int, int], int] = {}
    repeated_rows: list[list[int]] = []      # [row, the earlier row of the same point]
    dropped_ops = dict(DROPPED_OPS)
    if model.norm != "rms_norm":
        for op in NORM_OPS:
            dropped_ops[op] = f"{model.norm}: not an elementwise op the calibration models"
    if not model.gated:
        dropped_ops["mlp_act"] = "GELU: not an elementwise op the calibration models"
    if not model.sequential:
        dropped_ops["add"] = "three-way add of a parallel block: not the two-input residual add"
    for i, row in enumerate(rows, start=1):
        _check_model(row, model, model_name, display, i)
        m = _number(row, "num_tokens", display, i, integer=True)
        tp = _number(row, "num_tensor_parallel_workers", display, i, integer=True)
        seen_tokens.add(m)
        seen_tp.add(tp)
        for col, value in (("n_embd", model.hidden), ("n_head", model.heads),
                           ("n_kv_head", model.kv_heads), ("n_expanded_embd", model.ffn)):
            if value % tp:
                raise ImportError_(f"{display}: row {i}, column num_tensor_parallel_workers: "
                                   f"{tp} does not divide {col} ({value})")
        # every statistic of every op is checked, kept or not
        for op in list(GEMM_OPS) + ["mlp_act", "add", *NORM_OPS]:
            if op not in dropped_ops:
                _time(row, op, display, i)
        if tokens_kept is not None and m not in tokens_kept:
            continue
        if (m, tp) in first_row:
            repeated_rows.append([i, first_row[(m, tp)]])
            continue
        first_row[(m, tp)] = i
        kept_rows += 1
        hd = model.head_dim
        gemm_nk = {
            "qkv_proj": ((model.heads + 2 * model.kv_heads) * hd // tp, model.hidden),
            "o_proj": (model.hidden, model.heads * hd // tp),
            "gate_up_proj": ((2 if model.gated else 1) * model.ffn // tp, model.hidden),
            "down_proj": (model.hidden, model.ffn // tp),
        }
        for op, layer in GEMM_OPS.items():
            if layer == "gate_up_proj" and not model.gated:
                layer = "up_proj"
            n, k = gemm_nk["gate_up_proj" if layer == "up_proj" else layer]
            bias = model.bias or (model.qkv_bias and layer == "qkv_proj")
            shape = {"m": m, "n": n, "k": k, "model": short, "layer": layer,
                     "tensor_parallel": tp, "weight_bytes_per_elem": FP16_BYTES,
                     "act_bytes_per_elem": FP16_BYTES, "out_bytes_per_elem": FP16_BYTES,
                     "impl": f"vidur {op} (sarathi {'Column' if layer != 'o_proj' and layer != 'down_proj' else 'Row'}ParallelLinear{', bias' if bias else ''})"}
            out.append(_measurement("gemm", f"{short} {layer} m={m} tp={tp}", shape,
                                    _time(row, op, display, i), i))
        if tp != 1:
            continue               # elementwise ops: tensor-parallel degree 1 only (see selection)
        elementwise = []
        if model.norm == "rms_norm":
            elementwise += [(op, "rms_norm", model.hidden) for op in NORM_OPS]
        if model.gated:
            elementwise.append(("mlp_act", "silu_mul", model.ffn // tp))
        if model.sequential:
            elementwise.append(("add", "residual_add", model.hidden))
        for op, ours, hidden in elementwise:
            shape = {"op": ours, "tokens": m, "hidden": hidden, "bytes_per_elem": FP16_BYTES,
                     "tensor_parallel": tp, "impl": f"vidur {op}"}
            out.append(_measurement("elementwise", f"{short} {op} tokens={m}", shape,
                                    _time(row, op, display, i), i))
    selection = {
        "rows_in_source": len(rows), "rows_kept": kept_rows,
        "token_counts_in_source": len(seen_tokens),
        "token_counts_kept": (sorted(seen_tokens) if tokens_kept is None
                              else sorted(seen_tokens & set(tokens_kept))),
        "token_rule": ("every token count" if tokens_kept is None else
                       "a geometric-ish subset of the source's token counts "
                       "(gpu_traces.import_profiles.KEPT_TOKENS) to keep the shipped traces small; "
                       "`--all-tokens` keeps every row"),
        "tensor_parallel_degrees": sorted(seen_tp),
        "repeated_rows_dropped": repeated_rows,
        "repeated_rows_rule": ("a (token count, tensor-parallel degree) the source profiles more "
                               "than once: the first row is kept, later ones are listed here as "
                               "[row, kept row]"),
        "ops_kept": {**{op: f"gemm {name}" for op, name in GEMM_OPS.items()},
                     **{op: "elementwise (tensor-parallel degree 1 only: norms and the residual "
                            "add are the same kernel at every degree)"
                        for op in (*NORM_OPS, "mlp_act", "add") if op not in dropped_ops}},
        "ops_dropped": dropped_ops,
    }
    return out, selection


def _measurement(kind: str, label: str, shape: dict, time: dict, row: int,
                 dtype: str = "fp16", backend: str | None = None) -> dict:
    flops, nbytes = shapes.counts(kind, shape)
    return {"kind": kind, "label": label, "dtype": dtype, "backend": backend, "shape": shape,
            "flops": flops, "bytes": nbytes, "time": time, "source_row": row}


# ------------------------------------------------------------------------------------
# Network profiles (all_reduce.csv, send_recv.csv)
# ------------------------------------------------------------------------------------

def _kept_sizes(sizes: Iterable[int]) -> set[int]:
    sizes = sorted(set(sizes))
    return {min(sizes, key=lambda s: (abs(math.log(s / t)), s)) for t in KEPT_SIZE_TARGETS}


def network_measurements(rows: list[dict], op: str, topology: str, display: str,
                         all_sizes: bool) -> tuple[list[dict], dict]:
    sizes = [_number(r, "size", display, i, integer=True) for i, r in enumerate(rows, start=1)]
    keep = set(sizes) if all_sizes else _kept_sizes(sizes)
    out = []
    first_row: dict[tuple[int, int, int], int] = {}
    repeated_rows: list[list[int]] = []
    for i, row in enumerate(rows, start=1):
        if row["collective"].strip() != op:
            raise ImportError_(f"{display}: row {i}, column collective: {row['collective']!r} "
                               f"in a file of {op}")
        gpus = _number(row, "num_workers", display, i, integer=True)
        per_node = _number(row, "devices_per_node", display, i, integer=True)
        time = _time(row, op, display, i)
        if sizes[i - 1] not in keep:
            continue
        point = (sizes[i - 1], gpus, per_node)
        if point in first_row:
            repeated_rows.append([i, first_row[point]])
            continue
        first_row[point] = i
        shape = {"op": op, "elements": sizes[i - 1], "bytes_per_elem": FP16_BYTES, "gpus": gpus,
                 "gpus_per_node": per_node, "topology": topology}
        out.append(_measurement("collective", f"{op} {sizes[i - 1]} x fp16 on {gpus} GPUs "
                                              f"({per_node}/node)", shape, time, i,
                                backend="nccl"))
    selection = {
        "rows_in_source": len(rows), "rows_kept": len(out),
        "sizes_in_source": len(set(sizes)), "sizes_kept": sorted(keep),
        "repeated_rows_dropped": repeated_rows,
        "repeated_rows_rule": ("a (size, GPUs, GPUs per node) the source profiles more than "
                               "once: the first row is kept, later ones are listed as "
                               "[row, kept row]"),
        "size_rule": ("every message size" if all_sizes else
                      "the source size nearest each of 2048 x 2^(j/2) elements, j = 0..30 "
                      "(gpu_traces.import_profiles.KEPT_SIZE_TARGETS); `--all-tokens` keeps every row"),
    }
    return out, selection


# ------------------------------------------------------------------------------------
# Traces
# ------------------------------------------------------------------------------------

def _device_block(source_device: str) -> tuple[dict, str]:
    key, why = VIDUR_DEVICES[source_device]
    gpu = hardware.get(key)
    return {"type": "cuda", "name": gpu.display_name, "slug": re.sub(r"[^a-z0-9]+", "-", key.lower()),
            "catalogue_key": key, "memory_bytes": int(gpu.memory_bytes), "compute_units": gpu.sm_count,
            "compute_unit_kind": "SM", "capability": {"hopper": "9.0", "ampere": "8.0"}[gpu.arch],
            "cache_bytes": int(gpu.l2_bytes)}, why


def _trace(measurements: list[dict], *, source_device: str, rel_file: str, commit: str,
           commit_date: str, model: str | None, method: str, method_text: str,
           columns: dict, units: dict, selection: dict, description: str) -> dict:
    device, why = _device_block(source_device)
    return {
        "schema_version": SCHEMA_VERSION,
        "recorded_at": commit_date,
        "suite": {"name": "imported", "quick": False, "description": description,
                  "max_seconds": 1.0, "elapsed_s": 0.0, "stopped_by_time_limit": False},
        "device": device,
        "software": {"torch": "not stated by the source", "cuda": None, "driver": None,
                     "python": "not stated by the source", "numpy": None,
                     "platform": "not stated by the source"},
        "timing": {"method": method, "warmup": 2, "min_repeats": VIDUR_REPEATS,
                   "max_repeats": VIDUR_REPEATS, "target_s": 1.0, "cache_flush_bytes": 0,
                   "statistic": "median of the source's repeats, as the source computed it "
                                "(min, max, mean and std kept; no samples published)"},
        "units": {"time": "s", "bytes": "B", "flops": "FLOP"},
        "source": {
            "recorded_by_project": False, "repository": VIDUR_REPOSITORY, "commit": commit,
            "files": [rel_file], "licence": LICENCE_NAME, "licence_file": LICENCE_COPY,
            "device_as_named": source_device, "device_mapping": why, "model": model,
            "columns": columns, "units": units, "method": method_text,
            "importer": IMPORTER, "selection": selection,
        },
        "measurements": measurements,
        "skipped": [],
    }


COMPUTE_METHOD = ("vidur/profiling/mlp (profile_method record_function): one transformer "
                  "block in fp16 run 20 times in one forward pass after a warm-up pass; each op's "
                  "time is the sum of the CUDA kernels it launched, from the torch profiler's "
                  "trace; no cache flush between repeats")
NETWORK_METHOD = ("vidur/profiling/collectives: the collective on an fp16 buffer of `size` "
                  "elements, captured in a CUDA graph and timed with CUDA events, rank 0's "
                  "statistics")


def import_vidur_files(files: Sequence[tuple[Path, str]], *, commit: str, commit_date: str,
                       all_rows: bool = False) -> dict[str, dict]:
    """{output path relative to --out: trace} for source files given as (path, path in repo).

    Raises ImportError_ (file, row, column) or TraceError; returns only when every trace
    validates.
    """
    out: dict[str, dict] = {}
    for path, rel in files:
        c = COMPUTE_PATH.search(rel)
        n = NETWORK_PATH.search(rel)
        if c:
            dev, model = c.group("device"), c.group("model")
            if dev not in VIDUR_DEVICES:
                raise ImportError_(f"{rel}: device folder {dev!r} is not one this importer maps "
                                   f"to a catalogue GPU (valid: {', '.join(VIDUR_DEVICES)})")
            if model not in PROFILED_MODELS:
                raise ImportError_(f"{rel}: unknown model shape {model!r}: add its published "
                                   f"config to gpu_traces.import_profiles.PROFILED_MODELS "
                                   f"(known: {', '.join(PROFILED_MODELS)})")
            m = PROFILED_MODELS[model]
            ops = list(GEMM_OPS) + ["mlp_act", "add", *(NORM_OPS if m.norm == "rms_norm" else ())]
            rows = _read_csv(path, rel, SHAPE_COLUMNS + tuple(_stat_columns(ops)))
            meas, selection = compute_measurements(rows, model, rel,
                                                   None if all_rows else KEPT_TOKENS)
            columns = {f"time_stats.{op}.{{min,max,mean,median,std}}":
                       f"time.{{min,max,mean,median,std}}_s of {GEMM_OPS.get(op, op)}"
                       for op in ops}
            columns.update({"num_tokens": "shape.m / shape.tokens",
                            "num_tensor_parallel_workers": "shape.tensor_parallel",
                            "n_head, n_kv_head, n_embd, n_expanded_embd, use_gated_mlp":
                                "checked against the published config; GEMM shapes from it"})
            units = {"time_stats.*": "ms (milliseconds)", "num_tokens": "tokens",
                     "n_embd, n_expanded_embd": "elements"}
            trace = _trace(meas, source_device=dev, rel_file=rel, commit=commit,
                           commit_date=commit_date, model=model,
                           method="torch-profiler-kernel-sum", method_text=COMPUTE_METHOD,
                           columns=columns, units=units, selection=selection,
                           description=f"imported: vidur's fp16 kernel profile of one {model} "
                                       f"block on its '{dev}' device")
            out[f"{dev}/{model.replace('/', '--')}.json"] = validate_trace(trace, rel)
        elif n:
            topo, op = n.group("topology"), n.group("op")
            dm = NETWORK_DEVICE.match(topo)
            if not dm:
                raise ImportError_(f"{rel}: topology {topo!r} is not one this importer maps to "
                                   f"a catalogue GPU (valid: h100_*, a100_*)")
            rows = _read_csv(path, rel, NETWORK_COLUMNS + tuple(_stat_columns([op])))
            meas, selection = network_measurements(rows, op, topo, rel, all_rows)
            columns = {f"time_stats.{op}.{{min,max,mean,median,std}}":
                       "time.{min,max,mean,median,std}_s",
                       "size": "shape.elements", "num_workers": "shape.gpus",
                       "devices_per_node": "shape.gpus_per_node", "collective": "shape.op"}
            units = {"time_stats.*": "ms (milliseconds)", "size": "fp16 elements (2 bytes each)"}
            trace = _trace(meas, source_device=dm.group(1), rel_file=rel, commit=commit,
                           commit_date=commit_date, model=None,
                           method="cuda-events-cuda-graph", method_text=NETWORK_METHOD,
                           columns=columns, units=units, selection=selection,
                           description=f"imported: vidur's {op} profile on '{topo}'")
            out[f"{dm.group(1)}/network--{topo}--{op}.json"] = validate_trace(trace, rel)
        else:
            raise ImportError_(f"{rel}: not a vidur profile this importer reads "
                               f"(data/profiling/compute/<device>/<org>/<model>/mlp.csv or "
                               f"data/profiling/network/<topology>/{{all_reduce,send_recv}}.csv)")
    return out


# ------------------------------------------------------------------------------------
# Finding the files, the commit and the licence
# ------------------------------------------------------------------------------------

def _git_head(root: Path) -> tuple[str, str | None] | None:
    """(commit, None) read from root/.git without running git; None if not a checkout."""
    git = root / ".git"
    if git.is_file():                                    # a worktree: "gitdir: ..."
        m = re.match(r"gitdir:\s*(.+)", git.read_text().strip())
        git = (root / m.group(1)).resolve() if m else git
    head = git / "HEAD"
    if not head.is_file():
        return None
    ref = head.read_text().strip()
    if not ref.startswith("ref:"):
        return ref, None
    name = ref[4:].strip()
    common = git / "commondir"                           # a worktree's refs live in the main .git
    bases = [git] + ([(git / common.read_text().strip()).resolve()] if common.is_file() else [])
    for base in bases:
        loose = base / name
        if loose.is_file():
            return loose.read_text().strip(), None
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + name):
                    return line.split()[0], None
    return None


def _find_sources(paths: Sequence[Path]) -> tuple[list[tuple[Path, str]], Path | None]:
    """(file, path in the repository) of every profile, and the checkout root if found."""
    files, root = [], None
    for p in paths:
        p = p.resolve()
        if p.is_dir():
            root = p
            base = p / "data" / "profiling"
            if not base.is_dir():
                raise ImportError_(f"{p}: no data/profiling folder (is this a vidur checkout?)")
            for f in sorted(base.rglob("*.csv")):
                rel = f.relative_to(p).as_posix()
                if COMPUTE_PATH.search(rel) or NETWORK_PATH.search(rel):
                    dev = (COMPUTE_PATH.search(rel) or NETWORK_PATH.search(rel)).groups()[0]
                    if dev in VIDUR_DEVICES or NETWORK_DEVICE.match(dev):
                        files.append((f, rel))
        elif p.is_file():
            posix = p.as_posix()
            at = posix.rfind("data/profiling/")
            if at < 0:
                raise ImportError_(f"{p}: the path must end in data/profiling/... as in the "
                                   f"repository, so the device and model can be read from it")
            files.append((p, posix[at:]))
            root = root or Path(posix[:at] or ".")
        else:
            raise ImportError_(f"{p}: no such file or folder")
    if not files:
        raise ImportError_("no vidur profiles found")
    return files, root


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps_trace(trace: dict) -> str:
    """Compact text of an imported trace: one measurement per line (sorted keys)."""
    head = {**trace, "measurements": "__M__"}
    text = json.dumps(head, indent=1, sort_keys=True, ensure_ascii=False)
    rows = ",\n".join("  " + json.dumps(m, sort_keys=True, separators=(",", ":"))
                      for m in trace["measurements"])
    return text.replace('"__M__"', "[\n" + rows + "\n ]") + "\n"


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m gpu_traces.import_profiles", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", choices=["vidur"], help="which published profiles")
    p.add_argument("paths", nargs="+", type=Path, help="a checkout of the repository, or CSV files")
    p.add_argument("--commit", help="the source's commit (default: read from the checkout's .git)")
    p.add_argument("--commit-date", help="the commit's date, UTC, YYYY-MM-DDTHH:MM:SSZ (stored "
                                         "as the trace's date: the source does not date its runs)")
    p.add_argument("--licence", type=Path, help="the source's licence file (default: LICENSE at "
                                                 "the checkout root)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the traces")
    p.add_argument("--all-tokens", action="store_true",
                   help="keep every token count and message size (large files)")
    args = p.parse_args(argv)
    try:
        files, root = _find_sources(args.paths)
        commit = args.commit or (_git_head(root)[0] if root and _git_head(root) else None)
        if not commit or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise ImportError_("the source's commit is unknown: pass --commit SHA (40 hex digits) "
                               "or import from a git checkout")
        if not args.commit_date or not re.fullmatch(
                r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", args.commit_date):
            raise ImportError_("pass --commit-date YYYY-MM-DDTHH:MM:SSZ (the commit's date, UTC; "
                               "`git log -1 --format=%cd --date=iso-strict-local`)")
        licence = args.licence or (root / "LICENSE" if root else None)
        if licence is None or not licence.is_file():
            raise ImportError_(f"{licence}: the source's licence file is needed next to the "
                               f"imported traces (pass --licence)")
        traces = import_vidur_files(files, commit=commit, commit_date=args.commit_date,
                                    all_rows=args.all_tokens)
    except (ImportError_, TraceError) as e:
        print(f"error: {e}\nnothing was written", file=sys.stderr)
        return 2
    notice = (f"The traces in this folder were converted by `{IMPORTER}` from profiles "
              f"published in {VIDUR_REPOSITORY} at commit {commit}, under the licence below. "
              f"They were not recorded by this project.\n\n" + licence.read_text())
    _write_atomic(args.out / LICENCE_COPY, notice)
    for rel, trace in sorted(traces.items()):
        _write_atomic(args.out / rel, dumps_trace(trace))
        print(f"{args.out / rel}: {len(trace['measurements'])} measurements from "
              f"{trace['source']['files'][0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run("python -m gpu_traces.import_profiles", main))
