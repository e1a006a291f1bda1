"""Reading and checking traces: JSON Schema validation plus checks a schema cannot express.

Every reader of a trace goes through `load_trace` (or `validate_trace` for a dict in
memory). A trace is rejected with a TraceError whose message names the file, the place
in the JSON (e.g. `measurements[12].time.p25_s`) and what is wrong. No torch here: this
runs in the site's environment as well as the recorder's.
"""
from __future__ import annotations

import json
import os
import math
from pathlib import Path
from typing import Mapping

import jsonschema

from gpu_traces import shapes
from sim import hardware
from sim.cli import ArgumentParser, run

SCHEMA_VERSION = 2
OLDEST_READABLE_VERSION = 1   # version 1 files are upgraded in memory by `migrate`
SCHEMA_PATH = Path(__file__).resolve().parent / "trace.schema.json"
REL_TOL = 1e-9   # recomputed FLOPs/bytes and order statistics must match this closely

# Physical bounds on every timed point (gpu_traces/README.md, "What a trace must satisfy"). Rates are
# the point's minimal work (its `flops` and `bytes`) over its median time.
MIN_SAMPLE_S = 1e-7          # 100 ns: no timer here resolves a kernel shorter (CUDA events' floor)
MAX_SAMPLE_S = 60.0          # no single kernel of these suites runs for a minute
FLOPS_MARGIN = 1.25          # achieved FLOP/s <= 1.25 x the datasheet's dense FLOP/s of the dtype
BANDWIDTH_MARGIN_FLUSHED = 2.5   # achieved B/s <= 2.5 x datasheet DRAM B/s, cache flushed
BANDWIDTH_MARGIN_UNFLUSHED = 10.0  # ... and 10 x when it was not (inputs may sit in L2)
SLOWEST_SHARE = 1e-3         # a point may not be slower than 1 ms + its roofline time / 1e-3
SLOW_ALLOWANCE_S = 1e-3
BEST_RATE_SHARE = 0.2        # the best large point must reach 20% of the datasheet peak
LARGE_BYTES = 64 * 2 ** 20   # "large": at least 64 MiB of minimal traffic ...
LARGE_FLOPS = 1e11           # ... or 100 GFLOP of work


class TraceError(ValueError):
    """A trace that cannot be used; the message says which file, where, and what is wrong."""


def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def _where(path_parts) -> str:
    out = ""
    for p in path_parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


def _quantile(sorted_xs: list[float], q: float) -> float:
    # linear interpolation between closest ranks, as numpy.quantile's default does
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def time_stats(samples_s: list[float]) -> dict:
    """The `time` record of a measurement from its timed repeats (seconds)."""
    xs = sorted(float(x) for x in samples_s)
    return {"median_s": _quantile(xs, 0.5), "p25_s": _quantile(xs, 0.25),
            "p75_s": _quantile(xs, 0.75), "min_s": xs[0], "max_s": xs[-1],
            "repeats": len(xs), "samples_s": [float(x) for x in samples_s]}


def _semantic_errors(trace: Mapping) -> list[str]:
    """Checks beyond the schema: counts agree with shapes, times agree with their samples."""
    errors = []
    imported = "source" in trace
    if imported != (trace["suite"]["name"] == "imported"):
        errors.append("suite.name: 'imported' exactly when the trace has a `source` (an imported "
                      "trace is never labelled as this project's recording, nor the reverse)")
    for i, m in enumerate(trace["measurements"]):
        here = f"measurements[{i}] ({m['label']})"
        flops, nbytes = shapes.counts(m["kind"], m["shape"])
        if not _close(flops, m["flops"]) and not (flops == 0 == m["flops"]):
            errors.append(f"{here}.flops: {m['flops']} disagrees with its shape ({flops})")
        if not _close(nbytes, m["bytes"]):
            errors.append(f"{here}.bytes: {m['bytes']} disagrees with its shape ({nbytes})")
        t = m["time"]
        if imported and "samples_s" not in t:
            # summary statistics as the source published them; keep only what can be checked
            if not (t["min_s"] <= t["median_s"] <= t["max_s"]):
                errors.append(f"{here}.time: need min <= median <= max, got {t['min_s']}, "
                              f"{t['median_s']}, {t['max_s']}")
            continue
        missing = [k for k in ("p25_s", "p75_s", "samples_s") if k not in t]
        if missing:
            errors.append(f"{here}.time: a recorded measurement needs {', '.join(missing)}")
            continue
        if t["repeats"] != len(t["samples_s"]):
            errors.append(f"{here}.time.repeats: {t['repeats']} but "
                          f"{len(t['samples_s'])} samples")
            continue
        if not (t["min_s"] <= t["p25_s"] <= t["median_s"] <= t["p75_s"] <= t["max_s"]):
            errors.append(f"{here}.time: spread out of order (need min <= p25 <= median <= p75 "
                          f"<= max, got {t['min_s']}, {t['p25_s']}, {t['median_s']}, "
                          f"{t['p75_s']}, {t['max_s']})")
            continue
        want = time_stats(t["samples_s"])
        for key in ("median_s", "p25_s", "p75_s", "min_s", "max_s"):
            if not _close(want[key], t[key]):
                errors.append(f"{here}.time.{key}: {t[key]} is not the {key[:-2]} of its "
                              f"samples ({want[key]})")
    seen = {}
    for i, m in enumerate(trace["measurements"]):
        key = (m["kind"], m["dtype"], m["backend"], json.dumps(m["shape"], sort_keys=True))
        if key in seen:
            errors.append(f"measurements[{i}] ({m['label']}): duplicate of "
                          f"measurements[{seen[key]}]")
        seen[key] = i
    dev = trace["device"]
    if dev["type"] == "cpu" and dev["catalogue_key"] is not None:
        errors.append("device.catalogue_key: a CPU trace cannot stand for a catalogue GPU")
    if dev["type"] == "cuda" and "source" in trace:
        # an imported profile: the source names the device in its own words (source block),
        # not as a driver reports it; the importer states which catalogue GPU that is
        if dev.get("catalogue_key") not in hardware.CATALOGUE:
            errors.append(f"device.catalogue_key: an imported GPU profile must name a catalogue "
                          f"GPU (one of {', '.join(hardware.CATALOGUE)}), got "
                          f"{dev.get('catalogue_key')!r}")
    elif dev["type"] == "cuda":
        ident = hardware.identify_device(dev["name"])
        if dev.get("catalogue_key") != ident.key:
            why = f"it is {ident.key}" if ident.key else ident.reason
            errors.append(f"device.catalogue_key: {dev.get('catalogue_key')!r} does not match the "
                          f"device name {dev['name']!r} ({why})")
    return errors + physical_errors(trace)


def _gpu_of(trace: Mapping):
    key = trace["device"].get("catalogue_key")
    return hardware.get(key) if trace["device"]["type"] == "cuda" and key in hardware.CATALOGUE \
        else None


def physical_errors(trace: Mapping) -> list[str]:
    """Points no device could have produced, and GPU traces far slower than their GPU.

    Every trace: samples between MIN_SAMPLE_S and MAX_SAMPLE_S; achieved FLOP/s and bytes/s
    within the margins of the fastest catalogue GPU. A trace of a catalogue GPU: within the
    margins of that GPU's datasheet, no point slower than SLOW_ALLOWANCE_S plus its datasheet
    roofline time over SLOWEST_SHARE, and its best large point (copy, GEMM, attention) at
    BEST_RATE_SHARE of the datasheet at least (a CPU's numbers under a GPU's name fail here).
    """
    gpu = _gpu_of(trace)
    flushed = (trace["timing"].get("cache_flush_bytes", 0)
               >= trace["device"].get("cache_bytes", 0) > 0)
    bw_margin = BANDWIDTH_MARGIN_FLUSHED if flushed else BANDWIDTH_MARGIN_UNFLUSHED
    if gpu is not None:
        peak_bw, peak_flops, who = gpu.hbm_bandwidth_bytes_per_s, gpu.dense_flops, gpu.name
    else:
        peak_bw = max(g.hbm_bandwidth_bytes_per_s for g in hardware.CATALOGUE.values())
        peak_flops = {}
        who = "the fastest catalogue GPU"
    top_flops = max(f for g in (hardware.CATALOGUE.values() if gpu is None else [gpu])
                    for f in g.dense_flops.values())
    errors, best = [], []
    for i, m in enumerate(trace["measurements"]):
        here = f"measurements[{i}] ({m['label']})"
        t = m["time"]
        if t["min_s"] < MIN_SAMPLE_S or t["max_s"] > MAX_SAMPLE_S:
            errors.append(f"{here}.time: samples from {t['min_s']:.3g} s to {t['max_s']:.3g} s; "
                          f"a kernel time must lie between {MIN_SAMPLE_S:g} s and "
                          f"{MAX_SAMPLE_S:g} s")
            continue
        med = t["median_s"]
        bw, flops_rate = m["bytes"] / med, m["flops"] / med
        f_peak = peak_flops.get(m["dtype"], top_flops)
        if bw > bw_margin * peak_bw:
            errors.append(f"{here}.time.median_s: {med:.3g} s means {bw / 1e12:.3g} TB/s, more "
                          f"than {bw_margin:g} x the DRAM bandwidth of {who} "
                          f"({peak_bw / 1e12:.3g} TB/s; cache "
                          f"{'flushed' if flushed else 'not flushed'})")
        if flops_rate > FLOPS_MARGIN * f_peak:
            errors.append(f"{here}.time.median_s: {med:.3g} s means {flops_rate / 1e12:.3g} "
                          f"TFLOP/s, more than {FLOPS_MARGIN:g} x the dense {m['dtype']} peak of "
                          f"{who} ({f_peak / 1e12:.3g} TFLOP/s)")
        if gpu is None or m["kind"] == "collective":
            continue        # a collective moves its bytes over the interconnect, not through DRAM
        roof = max(m["bytes"] / peak_bw, m["flops"] / f_peak)
        if med > SLOW_ALLOWANCE_S + roof / SLOWEST_SHARE:
            errors.append(f"{here}.time.median_s: {med:.3g} s is over {1 / SLOWEST_SHARE:g} x "
                          f"the datasheet time of {gpu.name} ({roof:.3g} s) plus "
                          f"{SLOW_ALLOWANCE_S:g} s: not a time of this GPU")
        if m["bytes"] >= LARGE_BYTES or m["flops"] >= LARGE_FLOPS:
            best.append(roof / med)         # the share of its datasheet roofline it reached
    if best and max(best) < BEST_RATE_SHARE:
        errors.append(f"measurements: the best large point reaches {max(best):.2%} of the "
                      f"{gpu.name} datasheet roofline (need {BEST_RATE_SHARE:.0%}): these are "
                      f"not this GPU's times (a CPU's, or a unit error?)")
    return errors


def migrate(trace: dict) -> dict:
    """A trace of an older schema_version in the current layout (a new dict; times untouched).

    Version 1 -> 2: version 2 only adds optional fields (an imported trace's `source`, the
    `collective` kind, tensor-parallel degrees, summary-only times for imported data), so a
    version 1 trace is a version 2 trace with the number changed.
    """
    version = trace.get("schema_version")
    if version == 1:
        return {**trace, "schema_version": 2}
    if version == SCHEMA_VERSION:
        return trace
    raise TraceError(f"cannot migrate schema_version {version!r}")


def validate_trace(trace: object, source: str = "<trace>") -> dict:
    """Check a parsed trace; return it unchanged or raise TraceError naming `source`."""
    if not isinstance(trace, dict):
        raise TraceError(f"{source}: a trace is a JSON object, got {type(trace).__name__}")
    if "schema_version" not in trace:
        raise TraceError(f"{source}: missing 'schema_version' (is this a trace written by "
                         f"`python -m gpu_traces.record`?)")
    version = trace["schema_version"]
    if version in range(OLDEST_READABLE_VERSION, SCHEMA_VERSION):
        trace = migrate(trace)
        version = trace["schema_version"]
    if version != SCHEMA_VERSION:
        raise TraceError(f"{source}: schema_version {version!r} is not supported; this reader "
                         f"reads version {SCHEMA_VERSION}. Re-record the trace with this "
                         f"checkout's recorder.")
    validator = jsonschema.Draft202012Validator(_schema())
    problems = sorted(validator.iter_errors(trace), key=lambda e: list(map(str, e.absolute_path)))
    if problems:
        lines = [f"{_where(e.absolute_path)}: {_short(e)}" for e in problems[:10]]
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise TraceError(f"{source}: does not match {SCHEMA_PATH.name} "
                         f"({len(problems)} problem{'s' * (len(problems) > 1)}):\n  "
                         + "\n  ".join(lines) + more)
    errors = _semantic_errors(trace)
    if errors:
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise TraceError(f"{source}: inconsistent trace ({len(errors)} problem"
                         f"{'s' * (len(errors) > 1)}):\n  " + "\n  ".join(errors[:10]) + more)
    return trace


def _short(error: jsonschema.ValidationError) -> str:
    msg = error.message
    return msg if len(msg) < 300 else msg[:300] + "..."


def load_trace(path: Path | str) -> dict:
    """Read a trace file and validate it; TraceError says what is wrong and where."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    if not text.strip():
        raise TraceError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        ends_early = e.pos >= len(text.rstrip()) or not text.rstrip().endswith("}")
        hint = " (the file ends early: truncated?)" if ends_early else ""
        raise TraceError(f"{path}: not valid JSON at line {e.lineno}, column {e.colno}: "
                         f"{e.msg}{hint}") from None
    return validate_trace(data, str(path))


def migrate_file(path: Path | str) -> bool:
    """Rewrite a trace file in the current schema version (as the recorder writes files).

    Returns True when the file changed. Only the layout changes, never a time. The new
    file replaces the old whole (written beside it, then renamed); TraceError names a file
    that cannot be read or is not a trace, and leaves it as it was.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    except ValueError as e:
        raise TraceError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: not a trace (a JSON object is expected)")
    if data.get("schema_version") == SCHEMA_VERSION:
        return False
    new = validate_trace(migrate(data), str(path))
    tmp = path.with_name(f".{path.name}.migrating")
    try:
        tmp.write_text(json.dumps(new, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise TraceError(f"{path}: cannot be rewritten ({e.strerror or e}); it is unchanged") from None
    return True


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m gpu_traces.schema",
                       description="Rewrite trace files in the current schema version.")
    p.add_argument("--migrate", nargs="+", metavar="TRACE.json", required=True, type=Path,
                   help="trace files to rewrite in place")
    for path in p.parse_args(argv).migrate:
        print(f"{path}: {'migrated' if migrate_file(path) else 'already current'}")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(run("python -m gpu_traces.schema", main, errors=(TraceError,)))
