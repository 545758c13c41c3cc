"""Operation: health, readiness, metrics, JSON logs with request ids, settings, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from service_support import (
    BOOK,
    add_user,
    bearer,
    chat_body,
    read_events,
    serving,
    sqlite_url,
    toolwire_serve,
)
from toolwire.exceptions import ConfigError
from toolwire.messages import ToolResult
from toolwire.service import create_app
from toolwire.service.ops import JsonFormatter, configure_logging
from toolwire.settings import Settings
from toolwire.store import Database
from toolwire.testing import FunctionModel, ModelRequest, call, reply
from toolwire.testing.server import ScriptedServer, Step


def echo(request: ModelRequest) -> str:
    return "hello"


def booking(request: ModelRequest) -> Any:
    if isinstance(request.transcript[-1], ToolResult):
        return "Booked."
    return reply(None, call("create_item", BOOK), call("drop_database", {}))


def sample(metrics_text: str, name: str, **labels: str) -> float:
    """The value of one sample in the Prometheus text format (0 when absent)."""
    for line in metrics_text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] != name:
            continue
        found = (
            dict(part.split("=", 1) for part in head[len(name) + 1 : -1].split(",")) if "{" in head else {}
        )
        if {k: v.strip('"') for k, v in found.items()} == labels:
            return float(value)
    return 0.0


# --- health and readiness -------------------------------------------------------------------------


async def test_health_and_readiness_answer_when_the_database_does(tmp_path: Path) -> None:
    async with serving(Settings(database_url=sqlite_url(tmp_path)), FunctionModel(echo)) as (app, client):
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
        assistant = app.state.toolwire.started
        working = assistant.db
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        assistant.db = Database(f"postgresql://nobody@127.0.0.1:{closed}/none")
        try:
            unreachable = await client.get("/readyz")
        finally:
            await assistant.db.aclose()
            assistant.db = working

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    assert unreachable.status_code == 503
    assert unreachable.json()["status"] == "unavailable"
    assert str(closed) in unreachable.json()["reason"]


async def test_readiness_fails_until_the_service_has_started(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=sqlite_url(tmp_path)), model=FunctionModel(echo))
    transport = httpx2.ASGITransport(app=app)  # no lifespan: never started
    async with httpx2.AsyncClient(transport=transport, base_url="http://service") as client:
        assert (await client.get("/readyz")).status_code == 503
        assert (await client.get("/healthz")).status_code == 200


# --- metrics ------------------------------------------------------------------------------------------


async def test_metrics_count_requests_tool_calls_model_latency_and_rounds(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    async with serving(Settings(database_url=url), FunctionModel(booking)) as (_, client):
        await client.post("/v1/chat", json=chat_body("Book lunch"), headers=bearer(key))
        await client.post("/v1/chat", json=chat_body("Book lunch"))  # 401
        text = (await client.get("/metrics")).text

    assert sample(text, "toolwire_http_requests_total", method="POST", route="/v1/chat", status="200") == 1
    assert sample(text, "toolwire_http_requests_total", method="POST", route="/v1/chat", status="401") == 1
    assert sample(text, "toolwire_tool_calls_total", tool="create_item", outcome="ok") == 1
    # A name the model made up is counted, but under a bounded label.
    assert sample(text, "toolwire_tool_calls_total", tool="unknown", outcome="unknown_tool") == 1
    assert sample(text, "toolwire_model_request_duration_seconds_count", model="function", outcome="ok") == 2
    assert sample(text, "toolwire_run_rounds_count") == 1
    assert sample(text, "toolwire_run_rounds_sum") == 2
    assert sample(text, "toolwire_runs_total", outcome="done") == 1
    assert sample(text, "toolwire_runs_in_flight") == 0


async def test_each_app_has_its_own_metrics(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, first):
        await first.get("/healthz")
        await first.get("/healthz")
        async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, second):
            text = (await second.get("/metrics")).text
    assert sample(text, "toolwire_http_requests_total", method="GET", route="/healthz", status="200") == 0


# --- request ids and logs -------------------------------------------------------------------------


@pytest.fixture
def json_logs() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("info", secrets=["sk-model-secret"])
    try:
        yield
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        logging.getLogger("uvicorn.access").disabled = False


async def test_every_answer_carries_a_request_id_and_the_access_log_names_it(
    tmp_path: Path, json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    url = sqlite_url(tmp_path)
    user_id, key = await add_user(url, "alice")
    capsys.readouterr()
    configure_logging("info", secrets=["sk-model-secret"])  # bound to the captured stderr
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, client):
        given = await client.post(
            "/v1/chat", json=chat_body("hi"), headers={**bearer(key), "X-Request-Id": "trace-42"}
        )
        made = await client.get("/healthz", headers={"X-Request-Id": "bad id with spaces"})
        logging.getLogger("toolwire.test").warning("leaked %s and Bearer %s and sk-model-secret", key, key)

    assert given.headers["x-request-id"] == "trace-42"
    assert made.headers["x-request-id"].startswith("req_")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    access = [line for line in lines if line.get("path") == "/v1/chat"]
    assert len(access) == 1
    assert access[0]["request_id"] == "trace-42"
    assert (access[0]["status"], access[0]["user_id"], access[0]["tenant_id"]) == (200, user_id, "acme")
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    everything = json.dumps(lines)
    assert key.split("_", 2)[2] not in everything
    assert "sk-model-secret" not in everything
    assert "[redacted]" in everything


def test_the_json_formatter_masks_keys_tokens_and_secrets() -> None:
    formatter = JsonFormatter(["hunter2"])
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "key %s", ("tw_0123456789abcdef_" + "A" * 43,), None
    )
    record.password = "hunter2"
    line = json.loads(formatter.format(record))
    assert line["message"] == "key tw_0123456789abcdef_[redacted]"
    assert line["password"] == "[redacted]"
    assert "Bearer [redacted]" in formatter.scrub("Authorization: Bearer abc.def")


# --- settings --------------------------------------------------------------------------------------------


def test_settings_read_the_toml_file_then_the_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "toolwire.toml"
    config.write_text('port = 9000\nhost = "0.0.0.0"\nmax_body_bytes = 2048\nshutdown_timeout = 5\n')
    env = {"TOOLWIRE_CONFIG": str(config), "TOOLWIRE_PORT": "9100", "TOOLWIRE_RUN_TIMEOUT": "12.5"}

    settings = Settings.from_env(env)
    flagged = Settings.from_env(env, host="127.0.0.2")

    assert (settings.host, settings.port, settings.max_body_bytes) == ("0.0.0.0", 9100, 2048)
    assert (settings.shutdown_timeout, settings.run_timeout) == (5.0, 12.5)
    assert flagged.host == "127.0.0.2"


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        ("colour = 'blue'\n", {}, "unknown setting"),
        ("port = 'eighty'\n", {}, "whole number"),
        ("port = [\n", {}, "not valid TOML"),
        ("", {"TOOLWIRE_MAX_BODY_BYTES": "lots"}, "TOOLWIRE_MAX_BODY_BYTES"),
    ],
)
def test_bad_settings_are_config_errors(
    tmp_path: Path, content: str, env: dict[str, str], message: str
) -> None:
    config = tmp_path / "toolwire.toml"
    config.write_text(content)
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"TOOLWIRE_CONFIG": str(config), **env})


# --- the real command -----------------------------------------------------------------------------------


def _serve_env(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    env["TOOLWIRE_DATABASE_URL"] = sqlite_url(tmp_path)
    env.update(values)
    return env


def test_serve_without_a_model_fails_with_one_sentence(tmp_path: Path) -> None:
    # No endpoint, and the embedded model pointed at a file that is not there.
    missing = str(tmp_path / "missing.gguf")
    done = subprocess.run(
        [sys.executable, "-m", "toolwire", "serve"],
        env=_serve_env(tmp_path, TOOLWIRE_LOCAL_MODEL=missing),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Error: No model is configured" in done.stderr and "TOOLWIRE_BASE_URL" in done.stderr
    assert missing in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


async def test_sigterm_lets_a_running_stream_finish_then_exits(tmp_path: Path) -> None:
    _, key = await add_user(sqlite_url(tmp_path), "alice")
    async with ScriptedServer(
        lambda body, route: Step.reply("finished after the signal", latency=1.0)
    ) as model:
        values = {
            "TOOLWIRE_DATABASE_URL": sqlite_url(tmp_path),
            "TOOLWIRE_BASE_URL": model.base_url,
            "TOOLWIRE_MODEL": "scripted",
            "TOOLWIRE_API_KEY": "sk-model-secret",
            "TOOLWIRE_SHUTDOWN_TIMEOUT": "10",
        }
        async with toolwire_serve(values) as served:
            async with httpx2.AsyncClient(base_url=served.url, timeout=10) as client:
                body = chat_body("hello", "before-the-signal", stream=True)
                async with client.stream("POST", "/v1/chat", json=body, headers=bearer(key)) as response:
                    assert response.status_code == 200
                    served.process.send_signal(signal.SIGTERM)
                    events = [event async for event in read_events(response)]
            code = await asyncio.wait_for(served.process.wait(), 30)
        stderr = (await served.log).decode()

    assert events[-1] == ("done", events[-1][1])
    assert events[-1][1]["answer"] == "finished after the signal"
    # uvicorn ends by re-raising the signal it handled, once the graceful stop is complete.
    assert code in (0, -signal.SIGTERM), stderr
    with sqlite3.connect(tmp_path / "service.db") as db:
        assert db.execute("SELECT state FROM runs").fetchall() == [("done",)]
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line.get("path") == "/v1/chat" and line.get("status") == 200 for line in lines), stderr
    messages = [line["message"] for line in lines]
    assert messages.index("Shutting down") < messages.index("POST /v1/chat 200")
    assert "Application shutdown complete." in messages
    assert key.split("_", 2)[2] not in stderr
    assert "sk-model-secret" not in stderr
