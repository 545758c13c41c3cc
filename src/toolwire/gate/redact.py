"""Secrets never reach the model, the logs or the transcript store.

A `Redactor` holds credential values (API keys, passwords, tokens) and replaces every occurrence of
them in text with `[redacted]`. A credential rarely travels verbatim: an API that echoes its request
shows the password inside `Authorization: Basic base64(user:password)`, a query string shows it
percent-encoded, a JSON body shows it escaped. So each value is matched in all of those forms.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[redacted]"
"""What a secret is replaced with."""

_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _forms(secret: str) -> set[str]:
    """Every spelling of `secret` that an echoing API, a URL or a JSON document could show."""
    raw = secret.encode()
    forms = {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }
    # Some encoders write percent escapes in lower case (`%2f`); both are the same URL.
    forms |= {_PERCENT.sub(lambda m: m.group().lower(), form) for form in list(forms)}
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode()
        forms |= {text, text.rstrip("=")}
    forms.discard("")
    return forms


class Redactor:
    """Replaces every known secret value, in any of its common encodings, with `[redacted]`.

    Example:
        >>> r = Redactor(["s3cret", "alice:pa ss"])
        >>> r.redact("key=s3cret auth=Basic YWxpY2U6cGEgc3M= q=pa%20ss")
        'key=[redacted] auth=Basic [redacted] q=pa%20ss'

    Only whole values are matched (`pa ss` alone is not a secret above, `alice:pa ss` is): add each
    credential on its own as well as any combination that is sent encoded, such as `user:password`.
    """

    def __init__(self, secrets: Iterable[str] = (), *, replacement: str = REDACTED) -> None:
        self._secrets: set[str] = set()
        self._replacement = replacement
        self._pattern: re.Pattern[str] | None = None
        self._longest = 0
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        """Add secret values; empty strings are ignored."""
        fresh = {s for s in secrets if s and s not in self._secrets}
        if not fresh:
            return
        self._secrets |= fresh
        forms = set().union(*(_forms(s) for s in self._secrets))
        # Longest first, so a secret that contains another is replaced whole.
        alternatives = sorted(forms, key=lambda f: (-len(f), f))
        self._longest = len(alternatives[0])
        self._pattern = re.compile("|".join(re.escape(f) for f in alternatives))

    @property
    def longest(self) -> int:
        """The length of the longest form matched: a text cut this far past a limit is safe to cut."""
        return self._longest

    def redact(self, text: str) -> str:
        """Return `text` with every secret, in every form, replaced."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(self._replacement, text)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (keys included), returning a copy."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value

    def __contains__(self, text: object) -> bool:
        """Whether `text` holds any secret in any form."""
        return isinstance(text, str) and self._pattern is not None and bool(self._pattern.search(text))

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:
        # Never the values themselves: a repr ends up in logs.
        return f"Redactor({len(self._secrets)} secrets)"
