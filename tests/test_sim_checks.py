"""Input checks: every bad value becomes a ValueError that names the input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import checks


@pytest.mark.parametrize("value", [math.inf, math.nan, 2.5, "3", None, True, [1]])
def test_check_int_rejects_non_integers(value):
    with pytest.raises(ValueError, match="n must be an integer"):
        checks.check_int("n", value)


def test_check_int_accepts_integral_values():
    assert checks.check_int("n", 3) == 3
    assert checks.check_int("n", 3.0) == 3
    assert checks.check_int("n", np.int64(7), minimum=7, maximum=7) == 7
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        checks.check_int("n", 0, minimum=1)
    with pytest.raises(ValueError, match="n must be <= 5, got 6"):
        checks.check_int("n", 6, maximum=5)


@pytest.mark.parametrize("fn, value, match", [
    (checks.check_positive, 0, "x must be > 0"),
    (checks.check_positive, -1.5, "x must be > 0"),
    (checks.check_non_negative, -1e-9, "x must be >= 0"),
    (checks.check_number, math.inf, "x must be finite"),
    (checks.check_number, "1", "x must be a number"),
])
def test_number_checks(fn, value, match):
    with pytest.raises(ValueError, match=match):
        fn("x", value)


def test_range_and_choice():
    assert checks.check_range("a", 0.5, 0, 1) == 0.5
    with pytest.raises(ValueError, match=r"a must be in \[0, 1\], got 1.5"):
        checks.check_range("a", 1.5, 0, 1)
    with pytest.raises(ValueError, match="unknown colour 'red'; valid colours: blue, green"):
        checks.check_choice("colour", "red", ["blue", "green"])
