"""The contenders of the runner benchmarks: one run = user turn -> one `get_weather` call -> final text.

Every contender drives the scripted server (`_scripted.py`) with the same async tool, on either
route (`chat`, `responses`), streaming or not:
- `toolwire`: `Runner` over `OpenAIModel`;
- `openai loop`: a minimal hand-written loop on the official `openai` client;
- `httpx2 loop`: a minimal hand-written loop on bare `httpx2` (streaming: reads the SSE lines itself);
- `Agents SDK`: the OpenAI Agents SDK (`OpenAIChatCompletionsModel` / `OpenAIResponsesModel`);
- `Pydantic AI`: an `Agent` over `OpenAIChatModel` / `OpenAIResponsesModel`.
Each factory imports its library when called, so a process that measures one contender imports only
that contender's library (for import time and peak RSS). A peer that is not installed raises
`ImportError`; callers print "n/a" for it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSWER",
    "FRAMEWORKS",
    "NAMES",
    "PROMPT",
    "REFERENCES",
    "ROUTES",
    "Contender",
    "make",
    "weather",
]

PROMPT = "Weather in Paris?"
ANSWER = "18 degrees"
"""Part of the scripted server's final text: every run checks it got there."""
ROUTES = ("chat", "responses")
REFERENCES = ("openai loop", "httpx2 loop")
FRAMEWORKS = ("Agents SDK", "Pydantic AI")
NAMES = ("toolwire", *REFERENCES, *FRAMEWORKS)

_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name."}},
    "required": ["city"],
    "additionalProperties": False,
}
_DESCRIPTION = "Current weather for a city."
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": _DESCRIPTION, "parameters": _PARAMETERS},
    }
]
RESPONSES_TOOLS = [
    {"type": "function", "name": "get_weather", "description": _DESCRIPTION, "parameters": _PARAMETERS}
]


async def weather(city: str) -> str:
    """The one tool every contender calls (async everywhere, so nobody pays for a thread)."""
    return json.dumps({"city": city, "temp_c": 18, "sky": "sunny"})


@dataclass
class Contender:
    """One way of doing a run, ready to be called repeatedly."""

    name: str
    run: Callable[[], Awaitable[str]]
    """One whole run; returns the final text."""
    close: Callable[[], Awaitable[None]]


def make(name: str, base_url: str, route: str, stream: bool) -> Contender:
    """Build a contender; raises ImportError when its library is not installed."""
    factory = _FACTORIES[name]
    run, close = factory(base_url, route, stream)
    return Contender(name=name, run=run, close=close)


_Built = tuple[Callable[[], Awaitable[str]], Callable[[], Awaitable[None]]]


# --- toolwire ------------------------------------------------------------------------------------


def _toolwire(base_url: str, route: str, stream: bool) -> _Built:
    from toolwire import Runner, tool
    from toolwire.models.openai import OpenAIModel
    from toolwire.runner import RunComplete

    @tool
    async def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: City name.
        """
        return await weather(city)

    model = OpenAIModel("bench", base_url=base_url, api_key="bench", route=route)
    runner = Runner(model, [get_weather])

    async def run() -> str:
        return (await runner.run(PROMPT)).answer

    async def run_streaming() -> str:
        answer = ""
        async for event in runner.stream(PROMPT):
            if isinstance(event, RunComplete):
                answer = event.result.answer
        return answer

    return (run_streaming if stream else run), model.aclose


# --- the official openai client, by hand ---------------------------------------------------------


def _openai_loop(base_url: str, route: str, stream: bool) -> _Built:
    import openai

    loop = _OpenAILoop(openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0))
    return getattr(loop, route + ("_streaming" if stream else "")), loop.client.close


class _OpenAILoop:
    """The minimal loops on the official client, one per route and mode."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def chat(self) -> str:
        messages: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            response = await self.client.chat.completions.create(
                model="bench", messages=messages, tools=CHAT_TOOLS
            )
            message = response.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                output = await weather(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})

    async def chat_streaming(self) -> str:
        messages: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            chunks = await self.client.chat.completions.create(
                model="bench", messages=messages, tools=CHAT_TOOLS, stream=True
            )
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async for chunk in chunks:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    text.append(delta.content)
                for piece in delta.tool_calls or ():
                    _merge_fragment(calls, piece.index, piece.id, piece.function)
            if not calls:
                return "".join(text)
            await _answer_chat_calls(messages, calls)

    async def responses(self) -> str:
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            response = await self.client.responses.create(model="bench", input=items, tools=RESPONSES_TOOLS)
            if not await self._answer_calls(items, response.output):
                return str(response.output_text)

    async def responses_streaming(self) -> str:
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            events = await self.client.responses.create(
                model="bench", input=items, tools=RESPONSES_TOOLS, stream=True
            )
            text: list[str] = []
            final: Any = None
            async for event in events:
                if event.type == "response.output_text.delta":
                    text.append(event.delta)
                elif event.type == "response.completed":
                    final = event.response
            if not await self._answer_calls(items, final.output):
                return "".join(text)

    @staticmethod
    async def _answer_calls(items: list[Any], output: list[Any]) -> bool:
        """Append the output items and a result per call; False when there was no call."""
        calls = [item for item in output if item.type == "function_call"]
        if not calls:
            return False
        items += [item.model_dump(exclude_none=True) for item in output]
        for call in calls:
            result = await weather(**json.loads(call.arguments))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": result})
        return True


async def _answer_chat_calls(messages: list[Any], calls: dict[int, dict[str, Any]]) -> None:
    """Append the assembled calls of a streamed turn and their results."""
    messages.append({"role": "assistant", "tool_calls": list(calls.values())})
    for call in calls.values():
        output = await weather(**json.loads(call["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


def _merge_fragment(calls: dict[int, dict[str, Any]], index: int, id: Any, function: Any) -> None:
    """Fold one streamed Chat tool-call fragment (SDK object or dict) into the calls by index."""
    slot = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    if id:
        slot["id"] = id
    if function is None:
        return
    name = function.get("name") if isinstance(function, dict) else function.name
    arguments = function.get("arguments") if isinstance(function, dict) else function.arguments
    if name:
        slot["function"]["name"] = name
    if arguments:
        slot["function"]["arguments"] += arguments


# --- bare httpx2, by hand ------------------------------------------------------------------------


def _httpx2_loop(base_url: str, route: str, stream: bool) -> _Built:
    import httpx2

    loop = _Httpx2Loop(httpx2.AsyncClient(), base_url)
    return getattr(loop, route + ("_streaming" if stream else "")), loop.client.aclose


class _Httpx2Loop:
    """The minimal loops on bare httpx2, one per route and mode; streaming reads the SSE lines itself."""

    def __init__(self, client: Any, base_url: str) -> None:
        self.client = client
        self.chat_url = f"{base_url}/chat/completions"
        self.responses_url = f"{base_url}/responses"

    async def chat(self) -> str:
        messages: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            body = {"model": "bench", "messages": messages, "tools": CHAT_TOOLS}
            message = (await self.client.post(self.chat_url, json=body)).json()["choices"][0]["message"]
            calls = message.get("tool_calls")
            if not calls:
                return str(message.get("content") or "")
            messages.append(message)
            for call in calls:
                output = await weather(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    async def chat_streaming(self) -> str:
        messages: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            body = {"model": "bench", "messages": messages, "tools": CHAT_TOOLS, "stream": True}
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async with self.client.stream("POST", self.chat_url, json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    choices = json.loads(line[6:])["choices"]
                    if not choices:
                        continue
                    delta = choices[0]["delta"]
                    if delta.get("content"):
                        text.append(delta["content"])
                    for piece in delta.get("tool_calls") or ():
                        _merge_fragment(calls, piece["index"], piece.get("id"), piece.get("function"))
            if not calls:
                return "".join(text)
            await _answer_chat_calls(messages, calls)

    async def responses(self) -> str:
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            body = {"model": "bench", "input": items, "tools": RESPONSES_TOOLS}
            output = (await self.client.post(self.responses_url, json=body)).json()["output"]
            done = _responses_step(items, output)
            if done is not None:
                return done
            await _answer_responses_calls(items, output)

    async def responses_streaming(self) -> str:
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        while True:
            body = {"model": "bench", "input": items, "tools": RESPONSES_TOOLS, "stream": True}
            text: list[str] = []
            output: list[Any] = []
            async with self.client.stream("POST", self.responses_url, json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    if event["type"] == "response.output_text.delta":
                        text.append(event["delta"])
                    elif event["type"] == "response.completed":
                        output = event["response"]["output"]
            if _responses_step(items, output) is not None:
                return "".join(text)
            await _answer_responses_calls(items, output)


def _responses_step(items: list[Any], output: list[Any]) -> str | None:
    """The final text when `output` has no calls; otherwise None after appending the output items."""
    if not any(item["type"] == "function_call" for item in output):
        return "".join(
            part["text"]
            for item in output
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        )
    items += output
    return None


async def _answer_responses_calls(items: list[Any], output: list[Any]) -> None:
    for item in output:
        if item["type"] == "function_call":
            result = await weather(**json.loads(item["arguments"]))
            items.append({"type": "function_call_output", "call_id": item["call_id"], "output": result})


# --- the OpenAI Agents SDK -----------------------------------------------------------------------


def _agents_sdk(base_url: str, route: str, stream: bool) -> _Built:
    import agents
    import openai

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    model: Any = (
        agents.OpenAIResponsesModel("bench", client)
        if route == "responses"
        else agents.OpenAIChatCompletionsModel("bench", client)
    )

    @agents.function_tool
    async def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: City name.
        """
        return await weather(city)

    agent = agents.Agent(name="bench", model=model, tools=[get_weather])

    async def run() -> str:
        return str((await agents.Runner.run(agent, PROMPT)).final_output)

    async def run_streaming() -> str:
        result = agents.Runner.run_streamed(agent, PROMPT)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return (run_streaming if stream else run), client.close


# --- Pydantic AI ---------------------------------------------------------------------------------


def _pydantic_ai(base_url: str, route: str, stream: bool) -> _Built:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="bench")
    model = (
        OpenAIResponsesModel("bench", provider=provider)
        if route == "responses"
        else OpenAIChatModel("bench", provider=provider)
    )
    agent = Agent(model)

    @agent.tool_plain
    async def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: City name.
        """
        return await weather(city)

    async def run() -> str:
        return (await agent.run(PROMPT)).output

    async def run_streaming() -> str:
        async with agent.run_stream(PROMPT) as result:
            return "".join([delta async for delta in result.stream_text(delta=True)])

    return (run_streaming if stream else run), provider.client.close


_FACTORIES: dict[str, Callable[[str, str, bool], _Built]] = {
    "toolwire": _toolwire,
    "openai loop": _openai_loop,
    "httpx2 loop": _httpx2_loop,
    "Agents SDK": _agents_sdk,
    "Pydantic AI": _pydantic_ai,
}
