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
