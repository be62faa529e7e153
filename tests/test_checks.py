"""bertkit.checks.check_int: the one integer-argument check every layer uses."""

from __future__ import annotations

import re

import pytest

from bertkit.checks import ArgumentTypeError, check_int


def test_accepts_integers_at_or_above_the_minimum():
    assert check_int("batch_size", 1) == 1
    assert check_int("stride", 0, 0) == 0
    assert check_int("top_k", None, none_means="every label") is None


@pytest.mark.parametrize("value", [True, 2.0, "3", None, [1]])
def test_a_non_integer_is_a_type_error_that_is_also_a_value_error(value):
    message = re.escape(f"batch_size must be an integer >= 1, got batch_size={value!r} ({type(value).__name__}).")
    with pytest.raises(ArgumentTypeError, match=message) as caught:
        check_int("batch_size", value)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_below_the_minimum_names_the_argument_its_flag_and_the_value():
    with pytest.raises(ValueError, match=r"doc_stride \(--doc-stride\) must be an integer >= 0, got doc_stride=-1\.$"):
        check_int("doc_stride (--doc-stride)", -1, 0)
    with pytest.raises(ValueError, match=r"top_k must be an integer >= 1 or None \(every label\), got top_k=0"):
        check_int("top_k", 0, none_means="every label")
