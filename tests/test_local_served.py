"""`toolwire serve` with no upstream: the embedded model answers clients' own tools on both routes.

The real command in its own process, the real embedded model, and the official `openai` SDK as
the client: a Chat Completions client gets `tool_calls`, a Responses client gets a `function_call`
item, and each gets an answer in words once it sends the tool's result back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import pytest
from openai import AsyncOpenAI

from service_support import add_user, sqlite_url, toolwire_serve

pytestmark = [
    pytest.mark.skipif(
        find_spec("llama_cpp") is None,
        reason="the embedded model needs the local extra: pip install -e '.[local]' (make test installs it)",
    ),
    pytest.mark.timeout(600),  # three to four answers of the real model on two shared cores
]

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city, e.g. Berlin"}},
    "required": ["city"],
}
WEATHER_DESCRIPTION = "The current weather in a city."
ASKED = "What is the weather in Paris right now?"
RESULT = '{"city": "Paris", "temperature_c": 18, "sky": "sunny"}'


@asynccontextmanager
async def served(tmp_path: Path, model_path: Path) -> AsyncIterator[AsyncOpenAI]:
    """`toolwire serve` with no endpoint configured, and an SDK client signed in to it."""
    _, key = await add_user(sqlite_url(tmp_path), "alice")
    values = {"TOOLWIRE_DATABASE_URL": sqlite_url(tmp_path), "TOOLWIRE_LOCAL_MODEL": str(model_path)}
    async with (
        toolwire_serve(values) as service,
        AsyncOpenAI(base_url=f"{service.url}/v1", api_key=key, timeout=120, max_retries=0) as client,
    ):
        yield client


async def test_chat_completions_clients_get_real_tool_calls_from_the_embedded_model(
    tmp_path: Path, model_path: Path
) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER_DESCRIPTION,
                "parameters": WEATHER_PARAMETERS,
            },
        }
    ]
    async with served(tmp_path, model_path) as client:
        listed = [m.id async for m in client.models.list()]
        asked: Any = [{"role": "user", "content": ASKED}]
        first = await client.chat.completions.create(model="local", messages=asked, tools=tools)
        streamed = await client.chat.completions.create(
            model="local", messages=asked, tools=tools, stream=True
        )
        pieces: dict[str, str] = {"id": "", "name": "", "arguments": ""}
        finish = None
        async for chunk in streamed:
            for delta in chunk.choices[0].delta.tool_calls or []:
                pieces["id"] += delta.id or ""
                pieces["name"] += (delta.function and delta.function.name) or ""
                pieces["arguments"] += (delta.function and delta.function.arguments) or ""
            finish = chunk.choices[0].finish_reason or finish

        [call] = first.choices[0].message.tool_calls or []
        answered = await client.chat.completions.create(
            model="local",
            tools=tools,
            messages=[
                *asked,
                {"role": "assistant", "tool_calls": [cast(Any, call.model_dump(exclude_none=True))]},
                {"role": "tool", "tool_call_id": call.id, "content": RESULT},
            ],
        )

    assert "local" in listed
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.type == "function" and call.function.name == "get_weather"
    assert "paris" in json.loads(call.function.arguments)["city"].lower()
    assert finish == "tool_calls" and pieces["id"].startswith("call_")
    assert pieces["name"] == "get_weather" and "paris" in json.loads(pieces["arguments"])["city"].lower()
    text = answered.choices[0].message.content or ""
    assert answered.choices[0].finish_reason == "stop" and not answered.choices[0].message.tool_calls
    assert "18" in text or "sunny" in text.lower(), text


async def test_responses_clients_get_a_function_call_item_from_the_embedded_model(
    tmp_path: Path, model_path: Path
) -> None:
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": WEATHER_DESCRIPTION,
            "parameters": WEATHER_PARAMETERS,
            "strict": False,
        }
    ]
    async with served(tmp_path, model_path) as client:
        first = await client.responses.create(model="local", input=ASKED, tools=tools)
        [call] = [item for item in first.output if item.type == "function_call"]
        answered = await client.responses.create(
            model="local",
            tools=tools,
            input=[
                {"role": "user", "content": ASKED},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": RESULT},
            ],
        )

    assert first.status == "completed"
    assert call.name == "get_weather" and call.call_id
    assert "paris" in json.loads(call.arguments)["city"].lower()
    assert not [item for item in answered.output if item.type == "function_call"]
    assert "18" in answered.output_text or "sunny" in answered.output_text.lower(), answered.output_text
