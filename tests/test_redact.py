"""Redaction: a secret is replaced in every form an echoing API, a URL or JSON could show it."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

from toolwire.gate.redact import REDACTED, Redactor

SECRET = "s3cr/t+pa ss=ü"


def test_plain_value_is_replaced_everywhere_it_occurs() -> None:
    redactor = Redactor(["tok-123"])
    assert redactor.redact("a tok-123 b tok-123") == f"a {REDACTED} b {REDACTED}"


def test_url_encoded_forms_are_replaced() -> None:
    redactor = Redactor([SECRET])
    for form in (quote(SECRET, safe=""), quote_plus(SECRET, safe=""), quote(SECRET, safe="").lower()):
        assert form != SECRET
        assert redactor.redact(f"?key={form}&x=1") == f"?key={REDACTED}&x=1"


def test_base64_forms_are_replaced_padded_or_not() -> None:
    redactor = Redactor([SECRET])
    raw = SECRET.encode()
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode()
        assert redactor.redact(f"x {text} y") == f"x {REDACTED} y"
        assert redactor.redact(f"x {text.rstrip('=')} y") == f"x {REDACTED} y"


def test_basic_credentials_pair_is_replaced_inside_an_authorization_header() -> None:
    redactor = Redactor(["pa55word", "alice:pa55word"])
    header = "Basic " + base64.b64encode(b"alice:pa55word").decode()
    echoed = json.dumps({"headers": {"authorization": header}})
    assert json.loads(redactor.redact(echoed)) == {"headers": {"authorization": f"Basic {REDACTED}"}}


def test_json_escaped_forms_are_replaced() -> None:
    secret = 'quo"te\\back'
    redactor = Redactor([secret, "grüße"])
    document = json.dumps({"a": secret, "b": "grüße"})  # ensure_ascii escapes the umlaut
    assert "grüße" not in document and secret not in document
    assert json.loads(redactor.redact(document)) == {"a": REDACTED, "b": REDACTED}


def test_a_secret_containing_another_is_replaced_whole() -> None:
    redactor = Redactor(["abc", "abcdef"])
    assert redactor.redact("abcdef abc") == f"{REDACTED} {REDACTED}"


def test_values_added_later_are_replaced_too() -> None:
    redactor = Redactor()
    assert redactor.redact("token") == "token" and len(redactor) == 0
    redactor.add("token", "")
    assert redactor.redact("token") == REDACTED and len(redactor) == 1


def test_nested_values_are_redacted_keys_included() -> None:
    redactor = Redactor(["k3y"])
    value = {"k3y": ["x k3y", {"n": 1, "s": "k3y"}], "t": ("k3y",)}
    assert redactor.redact_value(value) == {
        REDACTED: [f"x {REDACTED}", {"n": 1, "s": REDACTED}],
        "t": [REDACTED],
    }


def test_membership_and_repr_never_show_the_values() -> None:
    redactor = Redactor(["hunter2"])
    assert "my hunter2" in redactor and "nothing here" not in redactor
    assert "hunter2" not in repr(redactor)


def test_longest_covers_every_form() -> None:
    redactor = Redactor(["ab", SECRET])
    assert redactor.longest >= len(quote_plus(SECRET, safe="")) and redactor.longest >= len(SECRET)
