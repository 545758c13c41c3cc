"""Sending an HTTP function's request and reading its answer for the model.

The rules: a GET is tried up to three times on timeouts and connection errors (exponential
backoff with jitter), a write exactly once; redirects are followed only to the same origin and path
prefix, at most three times; the answer is passed on unchanged if it is JSON or text, redacted,
and cut at a size limit with a marker; binary answers are refused; 4xx/5xx become `UpstreamError`.
A `Fence` holds what a call's URLs, redirects included, can never change: scheme, host, port and
the connection's path prefix.
"""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from toolwire.tools.auth import ConnectionAuth, TokenError

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "MAX_REDIRECTS", "MAX_TRIES", "Fence", "Sender", "UpstreamError"]

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024
"""Responses longer than this are cut before the model sees them."""
MAX_TRIES = 3
"""Tries of a GET on timeouts and connection errors; a write is sent once."""
MAX_REDIRECTS = 3
"""Same-origin redirects followed for one call."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-www-form-urlencoded",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/graphql",
    }
)
_UNRESOLVED = (
    "Name or service not known",
    "nodename nor servname",
    "getaddrinfo failed",
    "No address associated",
)


class UpstreamError(Exception):
    """The API could not be used: an HTTP error status, an unreachable host, an unusable answer.

    `code` is the Gate's error code for it: `upstream_error`, or `timeout` when every try timed out.
    """

    def __init__(
        self, message: str, *, status: int | None = None, body: str = "", code: str = "upstream_error"
    ):
        super().__init__(message)
        self.status = status
        """The HTTP status, or `None` when no answer came."""
        self.body = body
        """The answer's body, redacted and size-capped (empty when there was none)."""
        self.code = code
        """The Gate's error code: `upstream_error` or `timeout`."""

    @property
    def details(self) -> list[dict[str, Any]]:
        """The status and body, for the `details` of the error result."""
        return [{"status": self.status, "body": self.body}]


@dataclass(frozen=True)
class Fence:
    """Scheme, host and port fixed, and the path below a prefix."""

    origin: tuple[str, str, int | None]
    prefix: bytes
    whole_segments: bool
    """Whether the prefix ends at a segment boundary (`/api` admits `/api/x`, not `/apiary`)."""

    @classmethod
    def of(cls, origin: str, path_template: str) -> Fence:
        literal, placeholder, _ = path_template.partition("{")
        url = httpx2.URL(origin + (literal or "/"))
        prefix = url.raw_path.split(b"?")[0]
        return cls((url.scheme, url.host, url.port), prefix, not placeholder)

    def admits(self, url: httpx2.URL) -> bool:
        path = url.raw_path.split(b"?")[0]
        if (url.scheme, url.host, url.port) != self.origin:
            return False
        if not self.whole_segments:
            return path.startswith(self.prefix)
        return path == self.prefix or path.startswith(self.prefix.rstrip(b"/") + b"/")


def _content_kind(content_type: str | None) -> str:
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if not mime or mime == "application/octet-stream":
        return "unknown"  # decided by looking at the bytes
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    return "binary"


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


@dataclass(kw_only=True)
class Sender:
    """Sends one call's request through the shared client and turns the answer into model text."""

    client: httpx2.AsyncClient
    auth: ConnectionAuth
    timeout: float
    max_response_bytes: int
    tries: int
    backoff: Callable[[int], float]
    """Delay before try `n + 1` after try `n` failed."""
    sleep: Callable[[float], Awaitable[None]]

    async def send(self, request: httpx2.Request, *, allowed: Callable[[httpx2.URL], bool]) -> str:
        """Send `request` (redirects checked by `allowed`) and return the answer as text.

        Raises:
            UpstreamError: a 4xx/5xx answer, an unreachable host, a refused redirect, a binary answer.
        """
        request.extensions["timeout"] = httpx2.Timeout(self.timeout).as_dict()
        for hop in range(MAX_REDIRECTS + 1):
            response = await self._send_with_retries(request)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or location is None:
                break
            await response.aclose()
            target = request.url.join(location)
            if not allowed(target) or hop == MAX_REDIRECTS:
                shown = self.auth.redactor.redact(str(target.copy_with(query=None)))
                reason = (
                    "it leaves this connection's host and path"
                    if hop < MAX_REDIRECTS
                    else "too many redirects"
                )
                raise UpstreamError(
                    f"The API answered HTTP {response.status_code} redirecting to {shown}; "
                    f"not followed ({reason}).",
                    status=response.status_code,
                )
            request = self._redirected(request, response.status_code, target)
        try:
            text = await self._read(response)
        finally:
            await response.aclose()
        if response.status_code >= 400:
            raise UpstreamError(
                f"The API answered HTTP {response.status_code}: {text}",
                status=response.status_code,
                body=text,
            )
        return text or f"The API answered HTTP {response.status_code} with an empty body."

    def _redirected(self, request: httpx2.Request, status: int, target: httpx2.URL) -> httpx2.Request:
        method, content = request.method, request.content
        if method != "GET" and status == 303:
            method, content = "GET", b""  # See Other: the write is done, its result is elsewhere
        elif method != "GET" and status in (301, 302):
            raise UpstreamError(
                f"The API answered a {method} with HTTP {status}; it is not followed because the method "
                "would change. Check the connection URL.",
                status=status,
            )
        # The auth flow sets its credentials again; the client sets Host and the length again.
        dropped = {"authorization", "content-length", "host"} | (
            {"content-type"} if method == "GET" else set()
        )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
        follow = httpx2.Request(method, target, headers=headers, content=content or None)
        follow.extensions["timeout"] = request.extensions["timeout"]
        return follow

    async def _send_with_retries(self, request: httpx2.Request) -> httpx2.Response:
        failure: httpx2.HTTPError | None = None
        for attempt in range(1, self.tries + 1):
            if attempt > 1:
                await self.sleep(self.backoff(attempt - 1))
            try:
                return await self.client.send(request, auth=self.auth, stream=True, follow_redirects=False)
            except TokenError as exc:
                raise UpstreamError(str(exc), status=exc.status, body=exc.body) from None
            except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as exc:
                failure = exc
            except httpx2.HTTPError as exc:
                raise self._unreachable(exc, request, attempt) from None
        raise self._unreachable(
            failure or httpx2.ConnectError("no try was made"), request, self.tries
        ) from None

    def _unreachable(self, exc: httpx2.HTTPError, request: httpx2.Request, tries: int) -> UpstreamError:
        host = request.url.host
        detail = self.auth.redactor.redact(str(exc) or type(exc).__name__)
        attempts = f"{tries} {'try' if tries == 1 else 'tries'}"
        if isinstance(exc, httpx2.TimeoutException):
            return UpstreamError(
                f"{host} did not answer within {self.timeout:g}s ({attempts}); try again later.",
                code="timeout",
            )
        if any(marker in detail for marker in _UNRESOLVED):
            return UpstreamError(
                f"The host name {host} does not resolve ({attempts}); check the connection URL."
            )
        return UpstreamError(f"Could not reach {host}: {detail} ({attempts}); check the connection URL.")

    async def _read(self, response: httpx2.Response) -> str:
        """The body as text, redacted and cut at the limit; raise `UpstreamError` if it is binary."""
        limit, longest = self.max_response_bytes, self.auth.redactor.longest
        # Read a little past the limit so a secret that straddles it is still seen whole.
        cap = limit + 4 * longest + 4
        buffer = bytearray()
        cut = False
        async for chunk in response.aiter_bytes():
            buffer += chunk
            if len(buffer) > cap:
                del buffer[cap:]  # the same cut whatever the chunk sizes were
                cut = True
                break
        content_type = response.headers.get("content-type")
        kind = _content_kind(content_type)
        if kind == "binary" or (kind == "unknown" and _looks_binary(bytes(buffer[:4096]))):
            size = response.headers.get("content-length")
            shown = size if size and size.isdigit() else f"{'more than ' if cut else ''}{len(buffer)}"
            raise UpstreamError(
                f"binary response of {shown} bytes (content-type {content_type or 'not given'}) "
                "not passed to the model",
                status=response.status_code,
            )
        try:
            decoder = codecs.getincrementaldecoder(response.charset_encoding or "utf-8")(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = self.auth.redactor.redact(decoder.decode(bytes(buffer), final=not cut))
        if cut:
            # Only the unread end can hold part of a secret the redactor could not recognise.
            text = text[: max(0, len(text) - longest)]
        encoded = text.encode()
        if cut or len(encoded) > limit:
            text = encoded[:limit].decode(errors="ignore")
            text += (
                f"\n[truncated: the response is longer than {limit} bytes; only the first {limit} are shown]"
            )
        return text
