"""Fit a calibration to every recorded trace and write sim/calibrations/<device>.json.

    python -m gpu_traces.calibrate            # all traces under gpu_traces/traces/
    python -m gpu_traces.calibrate --check    # exit 1 if the shipped files are out of date
    python -m gpu_traces.calibrate --report   # the leave-one-out tables of the shipped files
    python -m gpu_traces.calibrate --residuals  # every imported linear layer's held-out miss

What is fitted (the formulas live in sim/kernel_model.py, shared with the simulations):

1. Every point is put in the training or the held-out set by a hash of its kind, dtype,
   backend and label (a quarter held out). The copy sweep and the square GEMMs define
   the peaks and always train.
2. Launch overhead and bandwidth: a straight line t = launch + bytes / BW through the
   copy sweep, least squares on the relative error.
3. FLOP/s per dtype: the best square GEMM, after its launch overhead.
4. GEMM shape terms per dtype (alpha, beta, tile_m, tile_n, p, m_half, fixed, fixed_m,
   m_fixed, k_step): Nelder-Mead on the mean
   log error (soft-L1, so a disturbed point cannot drag the fit) for every tile pair of
   a small grid; the best pair wins.
5. Attention per SDPA backend (alpha, beta, p, fixed cost, passes of the score matrix
   through memory), and a line per elementwise op.
6. The errors of the calibrated model and of the plain roofline (the same peaks and
   launch overhead, no shape terms) on the held-out points: median and max of
   |predicted - measured| / measured, overall and per kind.

Where each part lives: the fits (steps 1-6) in gpu_traces/fitting.py; imported profiles,
judged by leaving one model out, in gpu_traces/leave_out.py; this module reads the traces,
writes and checks the files (--check), and prints the reports (--report, --residuals).

Only numpy is used, so this runs in the site's environment and the recorder's alike.
Same traces in, byte-identical files out: parameters and times are rounded to 6
significant digits and keys are sorted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from gpu_traces.fitting import (GENERATOR, CalibrationError, _point_rows, device_identity,  # noqa: F401
                                fit_line, fit_trace, heldout, nelder_mead, torch_default_backend)
from gpu_traces.leave_out import (_imported_rows, _rel, fit_imported, in_processes,  # noqa: F401
                                  leave_one_model_out, monotone_floor, op_kind)
from gpu_traces.schema import TraceError, load_trace
from sim import hardware
from sim.calibration import CALIBRATION_DIR
from sim.cli import ArgumentParser, run

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = Path(__file__).resolve().parent / "traces"


def linear_residuals(traces_dir: Path = TRACES_DIR, jobs: int | None = None) -> str:
    """Every linear layer of the imported profiles with its leave-one-model-out prediction,
    worst first, then the errors by token count, layer and tensor-parallel degree: where the
    model misses, for whoever works on the formula (refits every fold; about a minute per GPU).
    """
    groups: dict[str, list] = {}
    for path in sorted(Path(traces_dir).rglob("*.json")):
        trace = load_trace(path)
        if "source" in trace and trace["device"]["catalogue_key"]:
            groups.setdefault(trace["device"]["catalogue_key"], []).append((path, trace))
    out = ["device,model,layer,m,n,k,tensor_parallel,measured_us,predicted_us,rel_err"]
    summary = []
    for key, traces in sorted(groups.items()):
        rows = [r for _, tr in sorted(traces, key=lambda pt: str(pt[0])) for r in _imported_rows(tr)]
        units = int(traces[0][1]["device"]["compute_units"])
        pred, _ = leave_one_model_out(rows, units, key, jobs)
        lin = [(r, p) for r, p in zip(rows, pred) if op_kind(r) == "linear"]
        err = np.array([(p - r["time_s"]) / r["time_s"] for r, p in lin])
        for i in np.argsort(-np.abs(err), kind="stable"):
            r, p = lin[i]
            s = r["shape"]
            out.append(f"{key},{r['model']},{s['layer']},{s['m']},{s['n']},{s['k']},"
                       f"{s.get('tensor_parallel', 1)},{r['time_s'] * 1e6:.4g},{p * 1e6:.4g},"
                       f"{err[i]:+.4f}")

        def line(name, mask):
            e = np.abs(err[mask])
            return (f"{key} {name}: n={int(mask.sum())} median {np.median(e):.1%}, "
                    f"max {np.max(e):.1%}, over 15% {np.mean(e > 0.15):.1%}")
        m = np.array([r["shape"]["m"] for r, _ in lin])
        summary.append(line("all", np.ones(len(lin), dtype=bool)))
        for lo, hi in ((1, 8), (9, 64), (65, 256), (257, 1024), (1025, 1 << 30)):
            summary.append(line(f"m {lo}-{hi if hi < 1 << 30 else 'up'}", (m >= lo) & (m <= hi)))
        for attr in ("layer", "tensor_parallel"):
            vals = np.array([r["shape"].get(attr, 1) for r, _ in lin])
            summary += [line(f"{attr} {v}", vals == v) for v in sorted(set(vals.tolist()))]
    return "\n".join(out) + "\n\n" + "\n".join(summary) + "\n"


# ------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------

def dumps(data: Mapping) -> str:
    """The file text: sorted keys, one point per line, a newline at the end."""
    head = {**data, "points": {**data["points"], "rows": "__ROWS__"}}
    text = json.dumps(head, indent=1, sort_keys=True, ensure_ascii=False)
    rows = ",\n".join("   " + json.dumps(r, sort_keys=True, separators=(",", ":"))
                      for r in data["points"]["rows"])
    return text.replace('"__ROWS__"', "[\n" + rows + "\n  ]") + "\n"


def _choose(traces: list[tuple[Path, dict]]) -> tuple[Path, dict]:
    # full suites before quick ones, then the most recent, then by path
    return sorted(traces, key=lambda pt: (pt[1]["suite"]["quick"],
                                          tuple(-ord(c) for c in pt[1]["recorded_at"]),
                                          str(pt[0])))[0]


def build_calibrations(traces_dir: Path = TRACES_DIR, root: Path = REPO_ROOT,
                       log=print, jobs: int | None = None) -> dict[str, str]:
    """{file name: text} of every calibration the traces under `traces_dir` give (the
    leave-one-model-out folds of imported profiles fitted on up to `jobs` processes)."""
    by_slug: dict[str, list] = {}
    imported: dict[str, list] = {}
    for path in sorted(Path(traces_dir).rglob("*.json")):
        trace = load_trace(path)                     # TraceError says what is wrong
        if trace.get("synthetic"):
            raise CalibrationError(f"{path}: a synthetic trace (made up by the model for tests) "
                                   f"does not belong among the recorded traces")
        dev = trace["device"]
        if "source" in trace:
            if not dev["catalogue_key"]:
                raise CalibrationError(f"{path}: an imported trace must name its catalogue GPU")
            imported.setdefault(hardware.device_slug(dev["catalogue_key"]), []).append((path, trace))
            continue
        key, slug = device_identity(dev)
        if dev["type"] == "cuda" and key is None:
            log(f"warning: {path}: {hardware.identify_device(dev['name']).reason}. Its "
                f"calibration (sim/calibrations/{slug}.json) is listed among the recorded "
                f"devices, but no catalogue GPU takes its numbers from it; if it is a catalogue "
                f"part, add its device name to that GPU in sim/hardware.py")
        by_slug.setdefault(slug, []).append((path, trace))
    out = {}
    for slug in sorted(set(by_slug) | set(imported)):
        if slug not in by_slug:
            data = fit_imported(imported[slug], root, jobs)
            out[f"{slug}.json"] = dumps(data)
            lomo = data["fit"]["leave_one_model_out"]
            log(f"{data['trace']['file']} (imported, {len(imported[slug])} files) => "
                f"sim/calibrations/{slug}.json: leave-one-model-out error (n={lomo['all']['model']['n']}) "
                f"model median {lomo['all']['model']['median_rel_err']:.1%}, max "
                f"{lomo['all']['model']['max_rel_err']:.1%}; plain roofline median "
                f"{lomo['all']['roofline']['median_rel_err']:.1%}, max "
                f"{lomo['all']['roofline']['max_rel_err']:.1%}")
            continue
        path, trace = _choose(by_slug[slug])
        rel = _rel(path, root)
        data = fit_trace(trace, rel)
        out[f"{slug}.json"] = dumps(data)
        h = data["fit"]["heldout"]
        log(f"{rel} => sim/calibrations/{slug}.json: held-out error (n={h['n']}) model median "
            f"{h['model']['median_rel_err']:.1%}, max {h['model']['max_rel_err']:.1%}; plain "
            f"roofline median {h['roofline']['median_rel_err']:.1%}, max "
            f"{h['roofline']['max_rel_err']:.1%}")
        for other, _ in by_slug[slug]:
            if other != path:
                log(f"  (not used: {other}, an older or quick trace of the same device)")
        for other, _ in imported.get(slug, []):
            log(f"  (not used: {other}, imported; this project's own recording of the device wins)")
    return out


def _atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    full disk or a crash leaves the old file (or none), never a truncated one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _is_generated(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("generated_by") == GENERATOR


def stray_files(out_dir: Path, files: Mapping[str, str]) -> list[str]:
    """Files in `out_dir` that no trace produces and that this tool did not write."""
    return sorted(q.name for q in Path(out_dir).glob("*.json")
                  if q.name not in files and not _is_generated(q))


def _stray_message(out_dir: Path, stray: Sequence[str]) -> str:
    return (f"{', '.join(stray)} in {out_dir} {'was' if len(stray) == 1 else 'were'} not written "
            f"by `{GENERATOR}` (no \"generated_by\": \"{GENERATOR}\") and no trace produces "
            f"{'it' if len(stray) == 1 else 'them'}: every calibration must come from a recorded "
            f"trace. Delete {'it' if len(stray) == 1 else 'them'}, or record a trace of that device "
            f"(gpu_traces/README.md); running `{GENERATOR}` does not remove files it did not write")


def write_calibrations(files: Mapping[str, str], out_dir: Path = CALIBRATION_DIR) -> None:
    """Write the files (atomically) and remove generated ones that no trace produces any more."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in sorted(out_dir.glob("*.json")):
        if old.name not in files and _is_generated(old):
            old.unlink()
    for name, text in files.items():
        p = out_dir / name
        if not p.exists() or p.read_text() != text:
            _atomic_write(p, text)


def quality_report(cal_dir: Path = CALIBRATION_DIR) -> str:
    """Markdown tables of the leave-one-out errors in the calibration files (no refitting).

    One row per device and op kind: points, the calibrated model's median and max
    |predicted - measured| / measured when fitted without the predicted model, and the
    plain roofline's on the same points; the floor under the linear layers' worst case
    (`monotone_floor`); then the linear-layer terms fitted to every model (GPUs),
    with their units; then each recorded trace's held-out errors per kernel kind, and the
    stated spec-sheet fallback's on the same GPU points; then the all-reduce fits, leaving
    one GPU count out.
    """
    out = ["| device | op kind | points | model median | model max | plain roofline median "
           "| plain roofline max |", "|---|---|---:|---:|---:|---:|---:|"]
    gemm = ["| device | dtype | FLOP/s reached, alpha F (of spec) | weights streamed, beta BW (of "
            "spec) | tile | corner p | m_half | launch | fixed | fixed_m | k_step per K element |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    floors = []
    recorded = ["| device | kernel kind | points | model median | model max | plain roofline median "
                "| plain roofline max |", "|---|---|---:|---:|---:|---:|---:|"]
    spec_rows = []
    comm = ["| device | measured in | GPUs | points | median | max | latency | bus bandwidth "
            "| corner p |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for path in sorted(Path(cal_dir).glob("*.json")):
        data = json.loads(path.read_text())
        lomo = data["fit"].get("leave_one_model_out")
        name = data["device"]["name"]

        def error_row(op, n, e):
            return (f"| {name} | {op} | {n} | {e['model']['median_rel_err']:.1%} "
                    f"| {e['model']['max_rel_err']:.1%} | {e['roofline']['median_rel_err']:.1%} "
                    f"| {e['roofline']['max_rel_err']:.1%} |")
        if lomo:
            out += [error_row(op, e["model"]["n"], e)
                    for op, e in [*lomo["by_op"].items(), ("all", lomo["all"])]]
        else:
            fit = data["fit"]
            rows = [(k, v["heldout"]) for k, v in fit["by_kind"].items() if v["heldout"]["n"]]
            recorded += [error_row(op, e["n"], e) for op, e in [*rows, ("all", fit["heldout"])]]
            spec = fit.get("spec_sheet_heldout")
            if spec:
                spec_rows.append(f"- {name}: median {spec['median_rel_err']:.1%}, max "
                                 f"{spec['max_rel_err']:.1%} ({data['trace']['file']}, recorded "
                                 f"{data['trace']['recorded_at'][:10]})")
        f = lomo.get("linear_monotone_floor") if lomo else None
        if f:
            t_a, t_b = (x * 1e6 for x in f["times_s"])
            floors.append(
                f"- {name}: {f['max_rel_err']:.1%}, from {f['model']} {f['layer']} "
                f"({f['n']} x {f['k']}, tensor-parallel {f['tensor_parallel']}): {t_a:.3g} µs "
                f"at {f['tokens'][0]} tokens, {t_b:.3g} µs at {f['tokens'][1]}; in "
                f"{f['series_over_15pct']} of the {f['series']} layers timed (model, layer, "
                f"tensor-parallel degree) the time falls by more than a 15% worst case allows")
        cal = data["calibration"]
        for dtype, g in sorted(cal["gemm"].items()) if cal["spec"] else ():   # GPUs only
            spec = cal["spec"]
            f = g["compute_efficiency"] * cal["flops_per_s"][dtype]
            b = g["bandwidth_efficiency"] * cal["bandwidth_bytes_per_s"]
            gemm.append(
                f"| {name} | {dtype} | {f / 1e12:.0f} TFLOP/s ({f / spec['flops_per_s'][dtype]:.0%}) "
                f"| {b / 1e12:.2f} TB/s ({b / spec['bandwidth_bytes_per_s']:.0%}) "
                f"| {g['tile_m']} x {g['tile_n']} | {g['smoothness']:.3g} "
                f"| {g['half_rate_tokens']:.3g} tokens | {cal['launch_overhead_s'] * 1e6:.2f} µs "
                f"| {g['fixed_s'] * 1e6:.2f} µs | {g.get('fixed_m_s', 0.0) * 1e6:.2f} µs "
                f"(half at {g.get('fixed_half_tokens', 0.0):.3g} tokens) "
                f"| {g.get('k_step_s', 0.0) * 1e12:.0f} ps |")
        a = data["calibration"].get("allreduce")
        if a:
            e = a["fit"]["leave_one_gpu_count_out"]["all"]
            comm.append(f"| {name} | {a['topology']} | {', '.join(map(str, a['gpu_counts']))} "
                        f"| {e['n']} | {e['median_rel_err']:.1%} | {e['max_rel_err']:.1%} "
                        f"| {a['latency_s'] * 1e6:.1f} µs | {a['bus_bytes_per_s'] / 1e9:.0f} GB/s "
                        f"| {a['smoothness']:.3g} |")
    floor = ("" if not floors else
             "\n\nLinear layers, the lowest worst case open to any model whose time never "
             "falls as tokens grow (some measured times do fall; the largest fall sets it):"
             "\n\n" + "\n".join(floors))
    return ("Leave one model out (fit on every other model, predict this one):\n\n"
            + "\n".join(out) + floor + "\n\nLinear layers, the fitted terms (imported profiles: fitted to every model; recorded traces: to the points not held out) (sim/kernel_model.py: "
            "t = launch + fixed + fixed_m m / (m + m_fixed) + k_step k + smooth-max_p(bytes / "
            "(beta BW), FLOPs / (alpha F eta))):\n\n" + "\n".join(gemm)
            + "\n\nRecorded traces (this project's recorder), a quarter of the points held out of "
            "the fit by a hash of their names:\n\n" + "\n".join(recorded)
            + ("" if not spec_rows else "\n\nThe stated fallback (80% of the datasheet's bandwidth, "
               "60% of its FLOP/s, a fixed launch cost) on the same held-out GPU points:\n\n"
               + "\n".join(spec_rows))
            + "\n\nAll-reduce inside one server, leave one GPU count out:\n\n"
            + "\n".join(comm) + "\n")


def main(argv=None) -> int:
    p = ArgumentParser(prog=GENERATOR, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=Path, default=TRACES_DIR, help="folder of traces")
    p.add_argument("--out", type=Path, default=CALIBRATION_DIR, help="folder for the calibrations")
    p.add_argument("--report", action="store_true",
                   help="print the leave-one-out error tables of the files in --out (no refit)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the files in --out differ from what the traces give")
    p.add_argument("--residuals", action="store_true",
                   help="print every imported linear layer's leave-one-model-out error, worst "
                        "first, and a summary by token count, layer and tensor-parallel degree")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes for the leave-one-model-out folds (default: the machine's "
                        "cores; 1 fits them in this process); the output is the same either way")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        p.error("--jobs must be 1 or more")
    if not args.traces.is_dir():
        p.error(f"--traces {args.traces}: not a folder of traces")
    if (args.report or args.check) and not args.out.is_dir():
        p.error(f"--out {args.out}: not a folder of calibrations")
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out}: a file, not a folder")
    if args.residuals:
        print(linear_residuals(args.traces, args.jobs), end="")
        return 0
    if args.report:
        print(quality_report(args.out), end="")
        return 0
    try:
        files = build_calibrations(args.traces, log=lambda s: print(s, file=sys.stderr), jobs=args.jobs)
    except (TraceError, CalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stray = stray_files(args.out, files)
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).exists() or (args.out / n).read_text() != text]
        gone = [q.name for q in args.out.glob("*.json")
                if q.name not in files and q.name not in stray]
        if stale or gone:
            print(f"out of date: {', '.join(stale + gone)}; run `{GENERATOR}`", file=sys.stderr)
        if stray:
            print(f"error: {_stray_message(args.out, stray)}", file=sys.stderr)
        return 1 if stale or gone or stray else 0
    try:
        write_calibrations(files, args.out)
    except OSError as e:
        print(f"error: cannot write {args.out}: {e}; the files there are unchanged",
              file=sys.stderr)
        return 2
    if stray:
        print(f"warning: {_stray_message(args.out, stray)}", file=sys.stderr)
    if not files:
        print(f"no traces under {args.traces}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(GENERATOR, main))
