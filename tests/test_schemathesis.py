"""The service against its own `/openapi.json`: generated requests, no 5xx, answers that conform.

Schemathesis reads the document from the app (in this process, over ASGI), generates valid and
invalid requests for every operation (the chat API, the OpenAI-compatible gateway, the admin API,
operation), sends them with a real administrator's key, and checks each answer: never a server
error, a status and content type the document declares, a body and headers matching its schema,
and invalid requests refused. The model is in-process and always answers, so a 5xx would be the
service's own fault. Examples are bounded per operation so the whole run takes seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from service_support import add_user, bearer, sqlite_url
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest

_EXAMPLES = 20


def answer(request: ModelRequest) -> str:
    return "Noted."


@pytest.fixture(scope="module")
def service_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("schemathesis")
    url = sqlite_url(folder)
    with pytest.MonkeyPatch.context() as env:
        # Credentials of connections the generated requests create are encrypted with this key.
        env.setenv("TOOLWIRE_SECRET_KEY", Fernet.generate_key().decode())
        _, key = asyncio.run(add_user(url, "root", scopes=("admin",)))
        app = create_app(Settings(database_url=url), model=FunctionModel(answer))
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)  # starts the app's lifespan
        try:
            yield schema, bearer(key)
        finally:
            asgi.shutdown_lifespans()


def _constrained(parameter: dict[str, Any]) -> bool:
    schema = parameter.get("schema", {})
    return schema.get("type") != "string" or bool(set(schema) - {"type", "title", "description"})


def _cases() -> list[Any]:
    """Every operation with valid requests; those that can be sent invalid ones, with those too.

    A path whose only parameters are plain strings, and no body, cannot be sent an invalid request.
    """
    # The document without starting the app (no database is opened before the lifespan runs).
    document = create_app(Settings(database_url="sqlite:///:memory:")).openapi()
    cases = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            modes = [GenerationMode.POSITIVE]
            if "requestBody" in operation or any(map(_constrained, operation.get("parameters", []))):
                modes.append(GenerationMode.NEGATIVE)
            cases += [
                pytest.param(method.upper(), path, mode, id=f"{method.upper()} {path} {mode.value}")
                for mode in modes
            ]
    return cases


@pytest.mark.parametrize(("method", "path", "mode"), _cases())
def test_every_operation_answers_as_documented(
    service_schema: tuple[Any, dict[str, str]], method: str, path: str, mode: GenerationMode
) -> None:
    schema, headers = service_schema
    operation = schema[path][method]
    statuses: list[int] = []
    # Excluded: "positive data acceptance". Some rules cannot be written in JSON Schema (a
    # connection URL must be absolute http(s), a user name starts with a letter or digit, a
    # function must fit its connection), so a schema-valid body may still get a 4xx; the other
    # checks still hold it to a documented status and the error body.
    excluded = [positive_data_acceptance]
    if path == "/admin/api/audit":
        # FastAPI reads a repeated query parameter as its last value, and `since` also as a Unix
        # time: lenient readings of filters, not requests that should fail.
        excluded.append(negative_data_rejection)

    @settings(
        max_examples=_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call_and_validate(headers=headers, excluded_checks=excluded)
        statuses.append(response.status_code)

    run()
    # Every request carried a working administrator's key, so the operations themselves answered;
    # an invalid request may also have had its credentials spoiled, which is then a 401.
    answered = [status for status in statuses if status not in (401, 403)]
    assert answered if mode == GenerationMode.NEGATIVE else answered == statuses
