"""Input checks shared by the simulations: each raises a ValueError that names the bad input.

Figures pass reader-controlled values straight into `sim/`, so every public function
validates its inputs and says what it expected rather than failing deep inside numpy.

>>> check_positive("batch", 0)
Traceback (most recent call last):
...
ValueError: batch must be > 0, got 0
"""
from __future__ import annotations

import math
from typing import Iterable


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or _is_numpy_number(value)


def _is_numpy_number(value: object) -> bool:
    # numpy scalars (np.int64, np.float64) without importing numpy here
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0


def check_number(name: str, value: object) -> float:
    """`value` as a float; ValueError if it is not a finite real number."""
    if not _is_number(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    f = float(value)  # type: ignore[arg-type]
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return f


def check_positive(name: str, value: object) -> float:
    """ValueError unless `value` > 0."""
    f = check_number(name, value)
    if not f > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return f


def check_non_negative(name: str, value: object) -> float:
    """ValueError unless `value` >= 0."""
    f = check_number(name, value)
    if f < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return f


def check_int(name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int (no silent truncation of 2.5); ValueError outside [minimum, maximum]."""
    if isinstance(value, bool) or not _is_number(value) or not math.isfinite(float(value)) \
            or float(value) != int(value):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be an integer, got {value!r}")
    i = int(value)  # type: ignore[arg-type]
    if minimum is not None and i < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and i > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return i


def check_range(name: str, value: object, low: float, high: float) -> float:
    """ValueError unless low <= `value` <= high."""
    f = check_number(name, value)
    if not low <= f <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return f


def check_choice(name: str, value: object, choices: Iterable[str], plural: str | None = None) -> str:
    """ValueError listing the valid choices unless `value` is one of them.

    >>> check_choice("policy", "fifo", ["static", "continuous"], "policies")
    Traceback (most recent call last):
    ...
    ValueError: unknown policy 'fifo'; valid policies: static, continuous
    """
    options = list(choices)
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}; valid {plural or name + 's'}: {', '.join(map(str, options))}")
    return value  # type: ignore[return-value]


# --------------------------------------------------------------------------- parameter ranges

# Upper bounds of the simulations' parameters, by field name: what a real deployment could
# have, with headroom. A `...Params` class decorated with `@checked_params` checks each of
# its fields named here (and each entry of a tuple-valued one) against its bound before its
# own checks run, so an absurd magnitude (1e300 tokens) is refused with the field's name
# instead of overflowing or exhausting memory. A class may declare tighter bounds for its
# own fields in a class attribute `LIMITS` of the same form. Lower bounds stay with each class.
CONTEXT_MAX = 2 ** 24        # 16,777,216 tokens: above the longest context any model states (10M)
OUTPUT_MAX = 2 ** 20         # 1,048,576 generated tokens per request
BATCH_MAX = 2 ** 16          # 65,536 sequences at once (vLLM's default max_num_seqs is 256-1024)
GRID_MAX = 4096              # samples along a plotted curve
SEED_MAX = 2 ** 32 - 1
LIMITS: dict[str, tuple[float, str]] = {
    # tokens
    "context_tokens": (CONTEXT_MAX, "tokens"), "prompt_tokens": (CONTEXT_MAX, "tokens"),
    "seq_len": (CONTEXT_MAX, "tokens"), "min_seq_len": (CONTEXT_MAX, "tokens"),
    "max_seq_len": (CONTEXT_MAX, "tokens"), "long_prompt_tokens": (CONTEXT_MAX, "tokens"),
    "kv_capacity_tokens": (2 ** 32, "tokens"), "token_budget": (CONTEXT_MAX, "tokens"),
    "prompt_tokens_min": (CONTEXT_MAX, "tokens"), "prompt_tokens_max": (CONTEXT_MAX, "tokens"),
    "median_tokens": (CONTEXT_MAX, "tokens"),
    "output_tokens": (OUTPUT_MAX, "tokens"), "output_tokens_min": (OUTPUT_MAX, "tokens"),
    "output_tokens_max": (OUTPUT_MAX, "tokens"),
    # sequences, devices, steps
    "batch": (BATCH_MAX, "sequences"), "max_batch": (BATCH_MAX, "sequences"),
    "users": (BATCH_MAX, "sequences"), "concurrent_users": (BATCH_MAX, "sequences"),
    "requests": (BATCH_MAX, "requests"), "gpus_per_node": (1024, "GPUs"),
    "data_parallel": (4096, "replicas"), "max_gpus": (2 ** 20, "GPUs"),
    "steps": (100_000, "steps"), "max_steps": (10_000_000, "steps"),
    # shapes
    "tile": (2 ** 16, "rows"), "head_dim": (4096, "elements"), "heads": (2 ** 20, "heads"),
    "block_size": (2 ** 16, "tokens"), "max_splits": (2 ** 16, "splits"),
    "quant_group_size": (2 ** 16, "weights"), "group_size": (2 ** 16, "weights"),
    "top_k": (2 ** 20, "tokens (larger than any vocabulary)"),
    "grid_points": (GRID_MAX, "points"), "points": (GRID_MAX, "points"),
    "seed": (SEED_MAX, ""),
    # continuous quantities
    "mean_interarrival_s": (86_400.0, "s"), "long_prompt_arrival_s": (86_400.0, "s"),
    "logits": (1e4, ""), "temperature": (1000.0, ""), "outlier_scale": (1e6, ""), "std": (1e6, ""),
    "intensity_min": (1e9, "FLOP/byte"), "intensity_max": (1e9, "FLOP/byte"),
    "budget_bytes": (2.0 ** 50, "bytes"), "reserve_bytes": (2.0 ** 50, "bytes"),
    "weight_bytes_per_elem": (16.0, "bytes"),
    "batch_timeout_s": (86_400.0, "s"), "rate_per_s": (1e6, "requests/s"),
    "bins": (4096, "bins"),
}


def _annotation(tp: object) -> str:
    return tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))


def _int_kind(tp: object) -> str:
    """'int' for an int field, 'ints' for a tuple of ints, '' otherwise (from the annotation)."""
    a = _annotation(tp).replace(" ", "")
    if a in ("int", "Optional[int]", "int|None", "None|int"):
        return "int"
    if a in ("tuple[int,...]", "Tuple[int,...]"):
        return "ints"
    return ""


def _whole(value: object) -> object:
    """A whole-number float or numpy scalar as an int (4.0 -> 4); anything else unchanged."""
    if isinstance(value, bool) or not _is_number(value):
        return value
    f = float(value)  # type: ignore[arg-type]
    return int(f) if math.isfinite(f) and f == int(f) and abs(f) < 2 ** 63 else value


def check_limit(name: str, value: object, limits: dict | None = None) -> None:
    """ValueError if a number exceeds the upper bound of the parameter `name` in `limits`
    (a class's own) or else in LIMITS."""
    bound = (limits or {}).get(name) or LIMITS.get(name)
    if bound is None or isinstance(value, bool) or not _is_number(value):
        return
    high, unit = bound
    f = float(value)  # type: ignore[arg-type]
    if f > high:
        raise ValueError(f"{name} must be <= {high:,.0f}{' ' + unit if unit else ''}, got {value!r}")
    if f < -high:       # no field goes below minus its bound
        raise ValueError(f"{name} must be >= {-high:,.0f}{' ' + unit if unit else ''}, got {value!r}")


def checked_params(cls):
    """Class decorator for a frozen `...Params` dataclass: before the class's own checks,
    whole-number floats in int fields become ints (k=4.0 -> 4; 2.5 is left for check_int
    to refuse) and every field named in LIMITS is checked against its upper bound."""
    import dataclasses

    own = cls.__dict__.get("__post_init__")
    limits = cls.__dict__.get("LIMITS", {})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), _int_kind(f.type)
            if kind == "int":
                value = _whole(value)
            elif kind == "ints" and isinstance(value, (tuple, list)):
                value = tuple(_whole(v) for v in value)
            if value is not getattr(self, f.name):
                object.__setattr__(self, f.name, value)
            for v in value if isinstance(value, (tuple, list)) else (value,):
                check_limit(f.name, v, limits)
        if own is not None:
            own(self)

    cls.__post_init__ = __post_init__
    return cls
