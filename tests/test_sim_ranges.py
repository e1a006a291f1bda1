"""Parameter ranges of the simulations: whole-number floats become ints at the boundary,
absurd magnitudes are refused with the field's name, and random valid inputs give
finite, monotone results."""
from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim
from sim import batching, checks, decode, kv
from tests.figure_sims import FIGURES


def checked_classes() -> list[type]:
    """Every dataclass in sim/ that validates its fields with @checked_params."""
    out = []
    for m in pkgutil.iter_modules(sim.__path__):
        mod = importlib.import_module(f"sim.{m.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and obj.__module__ == mod.__name__ and dataclasses.is_dataclass(obj) \
                    and getattr(obj, "__post_init__", print).__qualname__.startswith("checked_params"):
                out.append(obj)
    return sorted(out, key=lambda c: c.__qualname__)


CLASSES = checked_classes()


def numeric_fields(cls) -> list[tuple[str, object]]:
    """(name, default) of the fields whose default is a number or a tuple of numbers."""
    try:
        d = cls()
    except TypeError:       # a required field (MeasuredRooflineParams.device)
        return []
    out = []
    for f in dataclasses.fields(d):
        v = getattr(d, f.name)
        items = v if isinstance(v, tuple) else (v,)
        if items and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            out.append((f.name, v))
    return out


FIELDS = [(cls, name, default) for cls in CLASSES for name, default in numeric_fields(cls)]
INT_FIELDS = [(cls, name, default) for cls, name, default in FIELDS
              if checks._int_kind(next(f.type for f in dataclasses.fields(cls) if f.name == name))]


def limit_of(cls, name: str) -> float | None:
    bound = cls.__dict__.get("LIMITS", {}).get(name) or checks.LIMITS.get(name)
    return bound[0] if bound else None


def test_every_params_class_is_checked():
    """Each figure's parameters, and the shared ones, go through @checked_params."""
    names = {c.__name__ for c in CLASSES}
    assert {fs.params.__name__ for fs in FIGURES.values()} - {"HierarchyParams"} <= names
    assert {"Precision", "QuantScheme", "RequestMixParams"} <= names
    assert len(INT_FIELDS) > 60


@pytest.mark.parametrize("cls, name, default", INT_FIELDS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_whole_number_floats_become_ints(cls, name, default):
    as_float = tuple(float(x) for x in default) if isinstance(default, tuple) else float(default)
    got = getattr(cls(**{name: as_float}), name)
    assert got == default
    assert all(type(x) is int for x in (got if isinstance(got, tuple) else (got,)))


@pytest.mark.parametrize("cls, name, value", [(decode.DecodeMeterParams, "steps", 2.5),
                                               (kv.KVSizeParams, "batch", 1.5)])
def test_fractional_values_in_int_fields_are_refused(cls, name, value):
    with pytest.raises(ValueError, match=f"{name} must be an integer, got {value}"):
        cls(**{name: value})


@pytest.mark.parametrize("call", [
    # the reproductions: each once failed deep inside numpy with a TypeError naming no field
    lambda: FIGURES["ch09-speculative-rounds"].compute(FIGURES["ch09-speculative-rounds"].params(k=4.0)),
    lambda: FIGURES["ch07-paging"].compute(FIGURES["ch07-paging"].params(seed=0.0)),
    lambda: batching.sweep_batch(batching.BatchSweepParams(grid_points=48.0)),
])
def test_whole_number_floats_run(call):
    assert call() is not None


@pytest.mark.parametrize("cls, name, default", FIELDS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_absurd_magnitudes_are_refused_by_name(cls, name, default):
    """1e300 in any numeric field is a ValueError naming that field, never an overflow."""
    value = tuple(1e300 for _ in default) if isinstance(default, tuple) else 1e300
    with pytest.raises(ValueError, match=name):
        cls(**{name: value})


def test_limits_are_what_the_issue_asked():
    with pytest.raises(ValueError, match=r"context_tokens must be <= 16,777,216 tokens, got 1e\+300"):
        kv.KVSizeParams(context_tokens=1e300)
    with pytest.raises(ValueError, match="batch must be <= 65,536 sequences, got 10000000"):
        decode.DecodeMeterParams(batch=10_000_000)
    with pytest.raises(ValueError, match="grid_points must be <= 4,096"):
        kv.KVSizeParams(grid_points=10 ** 9)
    # the bound itself is a valid input
    assert kv.kv_size(kv.KVSizeParams(context_tokens=checks.CONTEXT_MAX)).kv_bytes > 0


@pytest.mark.parametrize("fid", sorted(FIGURES))
def test_default_controls_are_inside_the_limits(fid):
    p = FIGURES[fid].params()
    for name, v in numeric_fields(type(p)):
        high = limit_of(type(p), name)
        if high is not None:
            assert max(v if isinstance(v, tuple) else (v,)) <= high


# --------------------------------------------------------------------------- properties


# Result fields that are NaN by definition in some states: no batch where speculation stops
# paying; a single output token (no decode step, so no time per output token); a prefix
# cache too small for the workload's largest request (chapter 18's curves are not drawn there).
MAY_BE_NAN = {"break_even_batch", "speedup_at_kv_capacity", "time_per_output_token_s", "decode_tokens_per_s_per_user", "tpot_s",
              "tokens_per_s_per_user", "hit_rate_curve", "hit_rate_curve_radix",
              # chapter 20: a 10 s window in which no request was admitted; a rejected request; no
              # replica count that meets the P99 limits (prompts whose prefill alone misses them)
              "binned_ttft_p50_s", "binned_ttft_p99_s", "binned_tpot_p50_s", "binned_tpot_p99_s", "request_ttft_s",
              "request_tpot_s", "ideal_share", "static_cost_per_m_tokens"}


def assert_finite(result) -> None:
    for f in dataclasses.fields(result):
        v = getattr(result, f.name)
        if isinstance(v, (float, np.floating, np.ndarray)) and np.asarray(v).dtype.kind == "f":
            a = np.asarray(v, dtype=float)
            assert not np.isinf(a).any(), f"{f.name} is infinite"
            if f.name not in MAY_BE_NAN:
                assert not np.isnan(a).any(), f"{f.name} is NaN"


def scaled_int(low: int, high: int):
    """Integers in [low, high], log-uniformly (small and huge values equally often)."""
    return st.floats(math.log(max(low, 1)), math.log(high)).map(lambda x: max(low, min(high, round(math.exp(x)))))


FIGURE_FIELDS = [(fid, name, default) for fid in sorted(FIGURES)
                 for name, default in numeric_fields(FIGURES[fid].params)
                 if isinstance(default, int) and limit_of(FIGURES[fid].params, name)]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIGURE_FIELDS), st.floats(0, 1))
def test_any_valid_value_gives_a_finite_figure(field, where):
    """A field of a figure moved anywhere between its default and its upper bound: either a
    ValueError (a combination the simulation refuses, e.g. a group size not dividing the
    columns) or a result with no infinite and no unexpected NaN number."""
    fid, name, default = field
    fs = FIGURES[fid]
    high = int(limit_of(fs.params, name))
    value = round(math.exp(math.log(max(default, 1)) + where * (math.log(high) - math.log(max(default, 1)))))
    try:
        result = fs.compute(fs.params(**{name: value}))
    except ValueError as exc:          # refused, by the parameters or by the simulation, with a reason
        assert str(exc)
        return
    assert_finite(result)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(scaled_int(1, checks.CONTEXT_MAX), scaled_int(1, checks.BATCH_MAX), st.sampled_from(["bf16", "fp8"]))
def test_kv_size_is_finite_and_grows(context, batch, dtype):
    a = kv.kv_size(kv.KVSizeParams(context_tokens=context, batch=batch, kv_dtype=dtype))
    b = kv.kv_size(kv.KVSizeParams(context_tokens=min(2 * context, checks.CONTEXT_MAX), batch=batch, kv_dtype=dtype))
    assert_finite(a)
    assert 0 < a.kv_bytes <= b.kv_bytes
    # per token per sequence, the cache holds exactly the model's bytes per token
    assert a.kv_bytes == kv.kv_bytes_per_token("llama-3.1-8b", dtype) * context * batch


@settings(max_examples=25, deadline=None, derandomize=True)
@given(scaled_int(1, checks.BATCH_MAX), scaled_int(1, checks.CONTEXT_MAX))
def test_decode_step_time_grows_with_batch_and_context(batch, prompt):
    """More sequences or a longer context never make a decode step faster."""
    base = decode.decode_meter(decode.DecodeMeterParams(batch=batch, prompt_tokens=prompt, steps=2))
    more_users = decode.decode_meter(decode.DecodeMeterParams(
        batch=min(2 * batch, checks.BATCH_MAX), prompt_tokens=prompt, steps=2))
    longer = decode.decode_meter(decode.DecodeMeterParams(
        batch=batch, prompt_tokens=min(2 * prompt, checks.CONTEXT_MAX), steps=2))
    for r in (base, more_users, longer):
        assert_finite(r)
        assert (r.step_time_s > 0).all() and (np.diff(r.step_time_s) >= 0).all()
    assert more_users.step_time_s[0] >= base.step_time_s[0]
    assert longer.step_time_s[0] >= base.step_time_s[0]
    assert base.kv_bytes_per_step[0] <= longer.kv_bytes_per_step[0]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(scaled_int(1, checks.CONTEXT_MAX), scaled_int(1, 4096), scaled_int(1, 1024))
def test_prefill_and_decode_time_grow_with_lengths(prompt, output, batch):
    base = decode.phase_times(decode.PhaseParams(prompt_tokens=prompt, output_tokens=output, batch=batch))
    longer = decode.phase_times(decode.PhaseParams(prompt_tokens=min(2 * prompt, checks.CONTEXT_MAX),
                                                       output_tokens=2 * output, batch=batch))
    for r in (base, longer):
        assert_finite(r)
        assert r.prefill_time_s > 0 and r.decode_time_s >= 0
    assert longer.prefill_time_s >= base.prefill_time_s
    assert longer.decode_time_s >= base.decode_time_s
