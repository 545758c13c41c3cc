"""The service under load: `/v1/chat` with 100 conversations at once, and the gateway's added latency.

Everything runs as separate processes: the scripted upstream model (toolwire's `ScriptedServer`,
50 ms per answer), `toolwire serve` on a SQLite file in a temporary folder with an API key made by
`toolwire users add`, and this client. Every client is an `httpx2.AsyncClient` with keep-alive.

1. **`/v1/chat`**: batches of 100 concurrent conversations, each one user message whose script makes
   the model call the bookkeeping tool `create_item`, then answer with the booked id: two model
   rounds. Figures: conversations per second (median over the batches), p50 and p99 latency of one
   conversation (over every batch), and the CPU time per conversation of the service, the upstream
   and this client (they explain wall time beyond the model latency). References in the same run:
   the ideal, 2 x 50 ms of model latency; and the same batches as a minimal loop on bare `httpx2`
   straight to the upstream, executing the tool locally (two model calls and nothing else). The
   batches of the two alternate, the order rotating, so noise hits both alike.
2. **Gateway added latency**: `POST /v1/chat/completions` naming an upstream model (pass-through)
   against the same body sent straight to the upstream, one request at a time, interleaved
   (A, B, A, B...); at 50 ms upstream latency and at 0 ms (the pure overhead; the upstream answers a
   second model name, `scripted-0ms`, without delay). Figures: p50 and p99 of both and the
   difference. Target: at most 2 ms added at p50 with 50 ms upstream latency. Two more contenders,
   interleaved with these, are the floors of any Python gateway on this machine (`_proxy.py`): a
   minimal proxy (a bare ASGI function under the same uvicorn, forwarding the body with one pooled
   `httpx2.AsyncClient`, no authentication, no parsing), and the same proxy writing the request by
   hand on a bare asyncio socket, which tells the hop itself from the HTTP client's cost.

A missed target is marked, not an error; a failed request is an error.
Run: `.venv/bin/python benchmarks/service.py [--conversations 100] [--rounds 3] [--requests 200]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from _proxy import free_port, minimal_proxy
from _scripted import Served, serve_command

LATENCY = 0.05
MODEL = "scripted-50ms"
INSTANT_MODEL = "scripted-0ms"
"""A second upstream model name; the scripted upstream answers it without latency."""
ADDED_P50_TARGET_MS = 2.0
TITLE = "bench entry"

CREATE_ITEM: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "create_item",
        "description": "Book one new entry for the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "category": {"type": "string"},
                "amount": {"type": "number"},
                "title": {"type": "string"},
            },
            "required": ["category", "amount", "title"],
        },
    },
}


# --- the scripted upstream, in its own process ------------------------------------------------------


def script(body: dict[str, Any], route: str) -> Any:
    """Book what the user said with `create_item`; after the tool result, confirm the booked id."""
    from toolwire.messages import ToolResult
    from toolwire.testing.server import ScriptedServer, Step

    instant = {"latency": 0.0} if body.get("model") == INSTANT_MODEL else {}
    last = ScriptedServer.read_transcript(body, route)[-1]
    if isinstance(last, ToolResult):
        return Step.reply(f"Booked entry #{json.loads(last.content)['item']['id']}.", **instant)
    arguments = {"category": "bench", "amount": 1.5, "title": getattr(last, "content", TITLE)[:200]}
    return Step.call("create_item", arguments, **instant)


def upstream_main(latency: float) -> None:
    """Serve `script` until stdin closes; a line `cpu` prints this process's CPU seconds (as `_scripted`)."""
    from toolwire.testing.server import ScriptedServer

    with ScriptedServer(script, latency=latency, check_transcript=False) as server:
        print(f"READY {server.base_url}", flush=True)
        for line in sys.stdin:
            if line.strip() == "cpu":
                print(time.process_time(), flush=True)


def upstream(latency: float) -> contextlib.AbstractContextManager[Served]:
    return serve_command([sys.executable, str(Path(__file__)), "--upstream", str(latency)])


# --- `toolwire serve`, in its own process ------------------------------------------------------------


@dataclass
class Service:
    """A running `toolwire serve`: its URL, an API key, and its process for CPU time."""

    url: str
    key: str
    process: asyncio.subprocess.Process

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the service process so far (Linux `/proc`)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def service(upstream_url: str, folder: Path) -> AsyncIterator[Service]:
    from cryptography.fernet import Fernet

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    env |= {
        "TOOLWIRE_DATABASE_URL": f"sqlite:///{folder / 'service.db'}",
        "TOOLWIRE_BASE_URL": upstream_url,
        "TOOLWIRE_MODEL": MODEL,
        "TOOLWIRE_UPSTREAM_MODELS": INSTANT_MODEL,
        "TOOLWIRE_API_KEY": "sk-bench-upstream",
        "TOOLWIRE_HOST": "127.0.0.1",
        "TOOLWIRE_PORT": str(port),
        "TOOLWIRE_SECRET_KEY": Fernet.generate_key().decode(),
        "TOOLWIRE_LOG_LEVEL": "warning",
    }
    toolwire = (sys.executable, "-m", "toolwire")
    adding = await asyncio.create_subprocess_exec(
        *toolwire, "users", "add", "bench", "--json", env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(adding.communicate(), 60)
    if adding.returncode != 0:
        raise RuntimeError(f"toolwire users add failed: {err.decode().strip()}")
    key = json.loads(out)["api_key"]
    log = folder / "serve.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *toolwire, "serve", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=url, timeout=5) as client, asyncio.timeout(60):
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    if (await client.get("/readyz")).status_code == 200:
                        break
                if process.returncode is not None:
                    raise RuntimeError(f"toolwire serve stopped: {log.read_text()[-2000:]}")
                await asyncio.sleep(0.1)
        yield Service(url, key, process)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def _client() -> httpx2.AsyncClient:
    # Enough kept-alive connections for every conversation at once: none is opened twice.
    limits = httpx2.Limits(max_connections=400, max_keepalive_connections=400)
    return httpx2.AsyncClient(limits=limits, timeout=60)


# --- 1. /v1/chat: conversations at once ---------------------------------------------------------------


async def via_service(client: httpx2.AsyncClient, svc: Service, n: int) -> float:
    """One conversation through `/v1/chat`; its wall seconds."""
    body = {"messages": [{"role": "user", "content": f"{TITLE} {n}"}], "request_id": f"bench-{uuid.uuid4()}"}
    started = time.perf_counter()
    response = await client.post(
        f"{svc.url}/v1/chat", json=body, headers={"Authorization": f"Bearer {svc.key}"}
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"/v1/chat answered {response.status_code}: {response.text}")
    outcome = response.json()
    if outcome["rounds"] != 2 or not outcome["answer"].startswith("Booked entry #"):
        raise RuntimeError(f"/v1/chat did not reach the scripted answer in two rounds: {outcome}")
    return elapsed


async def create_item(category: str, amount: float, title: str) -> str:
    """The reference loop's tool: what `create_item` answers, without a database."""
    item = {"id": 1, "category": category, "amount": amount, "title": title}
    return json.dumps({"success": True, "item": item})


async def direct(client: httpx2.AsyncClient, upstream_url: str, n: int) -> float:
    """The same conversation as a minimal loop on bare httpx2 against the upstream; its wall seconds."""
    messages: list[Any] = [{"role": "user", "content": f"{TITLE} {n}"}]
    started = time.perf_counter()
    for _ in range(2):
        body = {"model": MODEL, "messages": messages, "tools": [CREATE_ITEM]}
        message = (await client.post(f"{upstream_url}/chat/completions", json=body)).json()["choices"][0][
            "message"
        ]
        calls = message.get("tool_calls")
        if not calls:
            break
        messages.append(message)
        for call in calls:
            output = await create_item(**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    elapsed = time.perf_counter() - started
    if not str(message.get("content") or "").startswith("Booked entry #"):
        raise RuntimeError(f"The direct loop did not reach the scripted answer: {message}")
    return elapsed


@dataclass
class Batches:
    """What the batches of one contender measured."""

    rates: list[float]
    latencies: list[float]
    service_cpu_s: float = 0.0
    """The service's CPU seconds over every batch (its idle cost only, for the direct loop)."""
    upstream_cpu_s: float = 0.0
    """The scripted upstream's CPU seconds over every batch: it serves both contenders."""
    client_cpu_s: float = 0.0
    """This process's CPU seconds over every batch."""


async def conversations(svc: Service, model: Served, size: int, rounds: int) -> dict[str, Batches]:
    measured = {"service": Batches([], []), "direct": Batches([], [])}
    async with _client() as client:

        async def batch(name: str) -> None:
            runs = (
                via_service(client, svc, n) if name == "service" else direct(client, model.base_url, n)
                for n in range(size)
            )
            cpu = svc.cpu_seconds(), model.cpu_seconds(), time.process_time()
            started = time.perf_counter()
            latencies = await asyncio.gather(*runs)
            wall = time.perf_counter() - started
            client_cpu = time.process_time() - cpu[2]
            figures = measured[name]
            figures.rates.append(size / wall)
            figures.latencies += latencies
            figures.service_cpu_s += svc.cpu_seconds() - cpu[0]
            figures.upstream_cpu_s += model.cpu_seconds() - cpu[1]
            figures.client_cpu_s += client_cpu

        for name in measured:  # warm-up: connections, caches, lazy imports, the SQLite file
            await batch(name)
        measured = {"service": Batches([], []), "direct": Batches([], [])}
        for number in range(rounds):
            for name in ("service", "direct") if number % 2 == 0 else ("direct", "service"):
                await batch(name)
    return measured


# --- 2. the gateway's added latency, one request at a time -----------------------------------------------


async def added_latency(
    svc: Service, proxies: dict[str, str], upstream_url: str, model: str, requests: int
) -> dict[str, list[float]]:
    """Interleaved pass-through, minimal-proxy and direct requests; their wall seconds."""
    body = {"model": model, "messages": [{"role": "user", "content": f"{TITLE} 1"}], "tools": [CREATE_ITEM]}
    targets = {
        "gateway": (f"{svc.url}/v1/chat/completions", {"Authorization": f"Bearer {svc.key}"}),
        **{name: (f"{url}/v1/chat/completions", {}) for name, url in proxies.items()},
        "direct": (f"{upstream_url}/chat/completions", {"Authorization": "Bearer sk-bench-upstream"}),
    }
    times: dict[str, list[float]] = {name: [] for name in targets}
    async with _client() as client:
        for number in range(requests + 20):  # the first 20 pairs warm up
            for name, (url, headers) in targets.items():
                started = time.perf_counter()
                response = await client.post(url, json=body, headers=headers)
                elapsed = time.perf_counter() - started
                if response.status_code != 200:
                    raise RuntimeError(f"{name} answered {response.status_code}: {response.text}")
                calls = response.json()["choices"][0]["message"].get("tool_calls") or []
                if [c["function"]["name"] for c in calls] != ["create_item"]:
                    raise RuntimeError(f"{name} did not return the scripted call: {response.text}")
                if number >= 20:
                    times[name].append(elapsed)
    return times


# --- report ------------------------------------------------------------------------------------------------


def _p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] * 1000


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


def report_conversations(measured: dict[str, Batches], size: int, rounds: int) -> str:
    ideal_ms = 2 * LATENCY * 1000
    svc, raw = measured["service"], measured["direct"]
    svc_rate, raw_rate = statistics.median(svc.rates), statistics.median(raw.rates)
    lines = [
        f"`/v1/chat`: {rounds} batches of {size} concurrent conversations each (user message, "
        f"`create_item`, answer: two model rounds at {LATENCY * 1000:g} ms); throughput is the median "
        "over the batches, latencies are over every conversation.\n",
        "| client | conversations/s | p50 ms | p99 ms | service CPU ms/conversation "
        "| upstream CPU ms/conversation | client CPU ms/conversation | p50 vs ideal | p50 vs httpx2 loop "
        "| p99 vs httpx2 loop | throughput vs httpx2 loop |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, figures, rate in (
        ("toolwire serve, `/v1/chat`", svc, svc_rate),
        ("bare httpx2 loop, straight to the upstream", raw, raw_rate),
    ):
        p50, p99 = _p50(figures.latencies), _p99(figures.latencies)
        count = len(figures.latencies)
        lines.append(
            f"| {name} | {rate:.1f} | {p50:.1f} | {p99:.1f} "
            f"| {figures.service_cpu_s / count * 1000:.2f} | {figures.upstream_cpu_s / count * 1000:.2f} "
            f"| {figures.client_cpu_s / count * 1000:.2f} "
            f"| {_ratio(p50, ideal_ms)} | {_ratio(p50, _p50(raw.latencies))} "
            f"| {_ratio(p99, _p99(raw.latencies))} | {_ratio(rate, raw_rate)} |"
        )
    lines.append(
        f"| ideal: 2 x {LATENCY * 1000:g} ms model latency | - | {ideal_ms:.1f} "
        "| - | - | - | - | 1.00x | | | |"
    )
    return "\n".join(lines)


def report_added(results: list[tuple[float, dict[str, list[float]]]], requests: int) -> str:
    lines = [
        f"\nGateway pass-through (`/v1/chat/completions`, an upstream model) against the same body sent "
        f"straight to the upstream: {requests} requests each, one at a time, interleaved.\n",
        "| pass-through | direct p50 ms | direct p99 ms | gateway p50 ms | gateway p99 ms "
        "| added p50 ms | added p99 ms | minimal httpx2 proxy: added p50 ms "
        "| bare-socket proxy: added p50 ms | gateway p50 vs direct "
        f"| target: added p50 <= {ADDED_P50_TARGET_MS:g} ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for latency, times in results:
        d50, d99 = _p50(times["direct"]), _p99(times["direct"])
        g50, g99 = _p50(times["gateway"]), _p99(times["gateway"])
        floor, hop = _p50(times["httpx2 proxy"]) - d50, _p50(times["socket proxy"]) - d50
        if latency == LATENCY:
            verdict = "met" if g50 - d50 <= ADDED_P50_TARGET_MS else f"**MISSED**: {g50 - d50:.2f} ms"
        else:
            verdict = "(none: the pure overhead)"
        lines.append(
            f"| upstream at {latency * 1000:g} ms | {d50:.2f} | {d99:.2f} | {g50:.2f} | {g99:.2f} "
            f"| {g50 - d50:.2f} | {g99 - d99:.2f} | {floor:.2f} | {hop:.2f} | {_ratio(g50, d50)} "
            f"| {verdict} |"
        )
    return "\n".join(lines)


async def main(size: int, rounds: int, requests: int) -> str:
    with upstream(LATENCY) as model, tempfile.TemporaryDirectory(prefix="toolwire-bench-") as folder:
        async with (
            service(model.base_url, Path(folder)) as svc,
            minimal_proxy(model.base_url) as proxy,
            minimal_proxy(model.base_url, "socket") as bare,
        ):
            measured = await conversations(svc, model, size, rounds)
            proxies = {"httpx2 proxy": proxy, "socket proxy": bare}
            added = [
                (LATENCY, await added_latency(svc, proxies, model.base_url, MODEL, requests)),
                (0.0, await added_latency(svc, proxies, model.base_url, INSTANT_MODEL, requests)),
            ]
    return report_conversations(measured, size, rounds) + "\n" + report_added(added, requests)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100, help="conversations at once per batch")
    parser.add_argument("--rounds", type=int, default=3, help="measured batches of each contender")
    parser.add_argument("--requests", type=int, default=200, help="sequential requests each, per latency")
    parser.add_argument("--upstream", type=float, help=argparse.SUPPRESS)  # run as the scripted upstream
    args = parser.parse_args()
    if args.upstream is not None:
        upstream_main(args.upstream)
    else:
        print(asyncio.run(main(args.conversations, args.rounds, args.requests)))
