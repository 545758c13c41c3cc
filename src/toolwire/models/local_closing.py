"""A logits processor that makes the embedded model add an optional argument only when it is sure.

Small models fill optional arguments the user never mentioned: a date filter of today on "show my
food entries", `status: "open"` on "list the tickets". Measured on the accuracy set in
`benchmarks/`, that is the most common wrong call. Where a call's arguments object may either end or
take another argument, this processor moves probability from "another argument" (`,`) to "end"
(`}`) by the factor `exp(bias)`, leaving the total of the two as it was: nothing else the model
might write at that point (the digits of a number, the rest of a string) changes, and the grammar
still decides what is allowed. An argument the user gave outweighs the bias; a guess does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ClosingBias"]

_ARGUMENTS_DEPTH = 2
"""`{"name": ..., "arguments": {` — the arguments object is the second level of braces."""


class _JsonCursor:
    """Where in a JSON text the decoder is: brace depth and whether inside a string."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.last = ""
        """The last character outside strings that is not whitespace (`"` for a closed string)."""
        self._escaped = False

    def feed(self, text: str) -> None:
        for char in text:
            if self.in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self.in_string = False
                    self.last = char
                continue
            if char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
            if not char.isspace():
                self.last = char


class ClosingBias:
    """Favour ending a call's arguments over adding another, by `exp(bias)`; one per call decoded.

    Args:
        groups: The model's token groups, from `ClosingBias.groups(pieces)`.
        start: How many tokens of the context precede the call's JSON body.
        bias: Natural-log odds moved from "another argument" to "end the arguments".
    """

    def __init__(self, groups: _Groups, start: int, bias: float) -> None:
        self._groups = groups
        self._start = start
        self._seen = start
        self._bias = bias
        self._cursor = _JsonCursor()

    @classmethod
    def groups(cls, pieces: Sequence[str]) -> _Groups:
        """The token groups the processor moves probability between (computed once per model)."""
        return _Groups(pieces)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Adjust `scores` (logits of the next token) after the tokens in `input_ids`."""
        ids = np.asarray(input_ids)
        for token in ids[self._seen :]:
            self._cursor.feed(self._groups.pieces[int(token)])
        self._seen = len(ids)
        cursor, groups = self._cursor, self._groups
        if cursor.depth == _ARGUMENTS_DEPTH - 1 and not cursor.in_string and cursor.last == ":":
            # Opening the arguments: `{}` or `{"` as one token.
            end, more = groups.open_empty, groups.open_key
        elif cursor.depth != _ARGUMENTS_DEPTH:
            return scores
        elif cursor.in_string:
            end, more = groups.quote_end, groups.quote_more
        elif cursor.last == "{":
            end, more = groups.end, groups.key  # no argument yet: none, or a first one
        else:
            end, more = groups.end, groups.more
        return _shift(np.asarray(scores), end, more, self._bias)


class _Groups:
    """Tokens that end the arguments object or go on to another argument, out of and in a string."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = list(pieces)
        stripped = [p.lstrip(" \n\t") for p in self.pieces]
        self.end = _starting(stripped, "}")
        self.more = _starting(stripped, ",")
        self.key = _starting(stripped, '"')
        # Tokens that join a brace or quote with what follows: `{}` / `{"`, `"}` / `",`.
        self.open_empty = _starting(stripped, "{}")
        self.open_key = _starting(stripped, '{"')
        self.quote_end = _starting(self.pieces, '"}')
        self.quote_more = _starting(self.pieces, '",')


def _starting(pieces: Sequence[str], prefix: str) -> Any:
    return np.array([t for t, p in enumerate(pieces) if p.startswith(prefix)], dtype=np.int64)


def _shift(scores: Any, end: Any, more: Any, bias: float) -> Any:
    """Multiply the odds of `end` against `more` by exp(bias), keeping their joint probability."""
    if not len(end) or not len(more):
        return scores
    top = float(max(scores[end].max(), scores[more].max()))
    p_end = float(np.exp(scores[end] - top).sum())
    p_more = float(np.exp(scores[more] - top).sum())
    if p_end + p_more <= 0.0:
        return scores
    total = p_end + p_more
    new_end = total * p_end * np.exp(bias) / (p_end * np.exp(bias) + p_more)
    new_more = total - new_end
    # Scale each group's logits so their sums become the new masses (a uniform shift in log space).
    adjusted = scores.copy()
    if p_end > 0.0:
        adjusted[end] += np.log(new_end / p_end)
    if p_more > 0.0 and new_more > 0.0:
        adjusted[more] += np.log(new_more / p_more)
    return adjusted
