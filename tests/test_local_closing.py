"""The closing bias: only the choice between ending a call's arguments and adding one moves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolwire.models.local_closing import ClosingBias

# A toy vocabulary: enough pieces to write `{"name": "f", "arguments": {"a": "x", "b": 12}}`.
PIECES = [
    '{"name": "f", "arguments": ',
    "{",
    '{"',
    "{}",
    '"a',
    '": ',
    '"x',
    '"',
    '"}',
    '",',
    "}",
    ",",
    " }",
    "12",
    "3",
]
ID = {piece: i for i, piece in enumerate(PIECES)}
GROUPS = ClosingBias.groups(PIECES)


def probabilities(scores: np.ndarray) -> np.ndarray:
    weights = np.exp(scores - scores.max())
    return weights / weights.sum()


def after(*pieces: str, bias: float = 2.0) -> np.ndarray:
    """The probabilities the processor leaves after the call body `pieces`, from uniform logits."""
    processor = ClosingBias(GROUPS, start=0, bias=bias)
    ids = [ID[p] for p in pieces]
    return probabilities(processor(ids, np.zeros(len(PIECES))))


def odds(p: np.ndarray, end: list[str], more: list[str]) -> float:
    return float(sum(p[ID[e]] for e in end) / sum(p[ID[m]] for m in more))


def test_after_a_number_ending_gains_exp_bias_and_digits_keep_their_probability() -> None:
    p = after('{"name": "f", "arguments": ', "{", '"a', '": ', "12")

    assert odds(p, ["}", " }"], [","]) == pytest.approx(2 * math.exp(2.0))  # two `}` tokens to one `,`
    assert p[ID["3"]] == pytest.approx(1 / len(PIECES))  # the number may still go on
    assert sum(p[ID[t]] for t in ("}", " }", ",")) == pytest.approx(3 / len(PIECES))


def test_closing_a_string_value_shifts_between_quote_brace_and_quote_comma() -> None:
    p = after('{"name": "f", "arguments": ', "{", '"a', '": ', '"x')

    assert odds(p, ['"}'], ['",']) == pytest.approx(math.exp(2.0))
    assert p[ID['"']] == pytest.approx(1 / len(PIECES))  # a plain closing quote is untouched


def test_before_the_first_argument_no_argument_gains() -> None:
    opening = after('{"name": "f", "arguments": ')
    first = after('{"name": "f", "arguments": ', "{")

    assert odds(opening, ["{}"], ['{"']) == pytest.approx(math.exp(2.0))
    # After `{`: `}` (two tokens start with it) against every token opening a key.
    keys = ['"a', '"x', '"', '"}', '",']
    assert odds(first, ["}", " }"], keys) == pytest.approx(2 / 5 * math.exp(2.0))


def test_inside_a_value_string_and_outside_the_arguments_nothing_changes() -> None:
    in_string = after('{"name": "f", "arguments": ', "{", '"a', '": ', '"x', "}")  # `}` inside "x}"
    closed = after('{"name": "f", "arguments": ', "{", '"a', '": ', "12", "}")  # arguments done

    assert in_string[ID['"}']] / in_string[ID['",']] == pytest.approx(math.exp(2.0))
    assert np.allclose(closed, 1 / len(PIECES))


def test_no_bias_leaves_the_scores_alone() -> None:
    assert np.allclose(
        after('{"name": "f", "arguments": ', "{", '"a', '": ', "12", bias=0.0), 1 / len(PIECES)
    )
