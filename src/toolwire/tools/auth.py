"""How a connection authenticates: its configuration, and the `httpx2.Auth` flow that applies it.

The credentials are added to the request as it leaves, inside the one pooled `httpx2.AsyncClient`
every HTTP function shares; the model never sees them and they are never part of a function
definition. Each flow also holds a `Redactor` of its credential values (and of every OAuth2 access
token it obtains), so responses that echo them can be cleaned before the model reads them.

OAuth2 client credentials is a small `httpx2.Auth` flow with a token cache, not Authlib's client:
Authlib 1.9's `AsyncOAuth2Client` does work with httpx2, but it *is* an `httpx2.AsyncClient`, with
its own pool and lifecycle, and cannot ride an existing client. The flow here sends the token
request through the shared client, keeps the token until shortly before `expires_in`, and fetches a
new one when it expires or when the API answers 401 to a cached token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote, urlsplit

import httpx2

from toolwire.gate.redact import REDACTED, Redactor

__all__ = [
    "SECRET_KEYS",
    "AuthConfig",
    "AuthType",
    "ConnectionAuth",
    "OAuth2ClientCredentialsAuth",
    "TokenError",
    "connection_auth",
]

AuthType = Literal["none", "api_key_header", "api_key_query", "basic", "bearer", "oauth2_client_credentials"]
"""How a connection authenticates."""

SECRET_KEYS: dict[str, tuple[str, ...]] = {
    "none": (),
    "api_key_header": ("api_key",),
    "api_key_query": ("api_key",),
    "basic": ("password",),
    "bearer": ("token",),
    "oauth2_client_credentials": ("client_secret",),
}
"""The keys of `AuthConfig.secrets` each auth type needs."""

_HEADER_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers the request itself controls: an API key must not be able to replace them.
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "idempotency-key", "cookie"}
)


@dataclass(kw_only=True, frozen=True)
class AuthConfig:
    """A connection's authentication: the type, its plain settings, and its secrets kept apart.

    `secrets` holds the credential values (`api_key`, `password`, `token` or `client_secret`, see
    `SECRET_KEYS`) so storage can encrypt them and APIs can treat them as write-only.
    """

    type: AuthType = "none"
    header_name: str | None = None
    """The header carrying the key (`api_key_header`), e.g. `X-API-Key`."""
    query_name: str | None = None
    """The query parameter carrying the key (`api_key_query`), e.g. `api_key`."""
    username: str | None = None
    """The user name (`basic`)."""
    token_url: str | None = None
    """The token endpoint (`oauth2_client_credentials`)."""
    client_id: str | None = None
    """The OAuth2 client id (`oauth2_client_credentials`)."""
    scopes: tuple[str, ...] = ()
    """OAuth2 scopes to request; none means the server's default."""
    token_auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    """How the client authenticates at the token endpoint (RFC 6749 section 2.3.1)."""
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    """The credential values; never shown, never logged."""

    def problems(self, path: str = "auth") -> list[tuple[str, str]]:
        """What is wrong with this configuration, as `(json path, what to do)` pairs."""
        found: list[tuple[str, str]] = []
        if self.type not in SECRET_KEYS:
            return [(f"{path}.type", f"unknown auth type {self.type!r}; use one of {', '.join(SECRET_KEYS)}")]
        for key in SECRET_KEYS[self.type]:
            if not self.secrets.get(key):
                found.append((f"{path}.secrets.{key}", f"auth type {self.type} needs the secret {key!r}"))
        if self.type == "api_key_header":
            name = self.header_name or ""
            if not _HEADER_TOKEN.match(name):
                found.append((f"{path}.header_name", "give the header name that carries the API key"))
            elif name.lower() in _RESERVED_HEADERS:
                found.append(
                    (f"{path}.header_name", f"{name} is set by the request itself; use another header")
                )
        if self.type == "api_key_query" and not self.query_name:
            found.append((f"{path}.query_name", "give the query parameter that carries the API key"))
        if self.type == "basic" and (not self.username or ":" in self.username):
            found.append((f"{path}.username", "give the user name (without ':') for Basic auth"))
        if self.type == "oauth2_client_credentials":
            parts = urlsplit(self.token_url or "")
            if parts.scheme not in ("http", "https") or not parts.hostname:
                found.append((f"{path}.token_url", "give the token endpoint as an absolute http(s) URL"))
            if not self.client_id:
                found.append((f"{path}.client_id", "give the OAuth2 client id"))
        return found

    def secret_values(self) -> list[str]:
        """Every credential value, and every combination of them sent encoded (`user:password`)."""
        values = [v for v in self.secrets.values() if v]
        if self.type == "basic" and self.username is not None:
            values.append(f"{self.username}:{self.secrets.get('password', '')}")
        if self.type == "oauth2_client_credentials" and self.client_id:
            secret = self.secrets.get("client_secret", "")
            values += [f"{self.client_id}:{secret}", _basic_pair(self.client_id, secret)]
        return values

    def masked_headers(self) -> dict[str, str]:
        """The headers this auth adds, with the credential shown as `[redacted]`."""
        if self.type == "api_key_header" and self.header_name:
            return {self.header_name: REDACTED}
        if self.type == "basic":
            return {"Authorization": f"Basic {REDACTED}"}
        if self.type in ("bearer", "oauth2_client_credentials"):
            return {"Authorization": f"Bearer {REDACTED}"}
        return {}

    def masked_params(self) -> dict[str, str]:
        """The query parameters this auth adds, with the credential shown as `[redacted]`."""
        if self.type == "api_key_query" and self.query_name:
            return {self.query_name: REDACTED}
        return {}


def _basic_pair(client_id: str, secret: str) -> str:
    # RFC 6749 section 2.3.1: both parts are form-encoded before they are joined.
    return f"{quote(client_id, safe='')}:{quote(secret, safe='')}"


def _basic(pair: str) -> str:
    return "Basic " + base64.b64encode(pair.encode()).decode()


class TokenError(Exception):
    """The token endpoint refused the client or answered something that is not a token."""

    code = "upstream_error"

    def __init__(self, message: str, *, status: int | None, body: str) -> None:
        super().__init__(message)
        self.status = status
        """The token endpoint's HTTP status."""
        self.body = body
        """Its answer, redacted."""


class ConnectionAuth(httpx2.Auth):
    """Applies a connection's credentials to each request, and knows which values to redact."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        self.redactor = Redactor(config.secret_values())
        """Every credential value this auth has sent or will send."""

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        config, secrets = self.config, self.config.secrets
        if config.type == "api_key_header" and config.header_name:
            request.headers[config.header_name] = secrets["api_key"]
        elif config.type == "api_key_query" and config.query_name:
            # Set, not appended: an argument of the same name cannot displace the key.
            request.url = request.url.copy_set_param(config.query_name, secrets["api_key"])
        elif config.type == "basic":
            request.headers["Authorization"] = _basic(f"{config.username}:{secrets['password']}")
        elif config.type == "bearer":
            request.headers["Authorization"] = f"Bearer {secrets['token']}"
        yield request

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.config.type!r})"


class OAuth2ClientCredentialsAuth(ConnectionAuth):
    """OAuth2 client credentials with a token cache, refreshed on expiry and on a 401.

    Args:
        config: An `oauth2_client_credentials` configuration.
        clock: Monotonic seconds; tests pass a fake one to move past the expiry.
        leeway: Seconds before `expires_in` runs out at which the token counts as expired.
        timeout: Seconds for the token request.
    """

    def __init__(
        self,
        config: AuthConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        leeway: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(config)
        self._clock = clock
        self._timeout = timeout
        self._leeway = leeway
        self._token: str | None = None
        self._expires_at = 0.0
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def _lock(self) -> asyncio.Lock:
        # One lock per event loop: concurrent calls wait for one token request instead of each
        # sending their own, and an asyncio.Lock cannot be shared across loops.
        loop = asyncio.get_running_loop()
        if loop not in self._locks:
            self._locks = {loop: asyncio.Lock()}
        return self._locks[loop]

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        raise RuntimeError("OAuth2 client credentials needs an httpx2.AsyncClient.")

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self._lock():
            token = self._token if self._token and self._clock() < self._expires_at else None
            fresh = token is None
            if token is None:
                reply = yield self._token_request()
                await reply.aread()
                token = self._store(reply)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401 or fresh:
            return
        # The API no longer accepts a cached token (revoked, or its clock runs ahead): get a new
        # one, unless a concurrent call already did, and send the request once more.
        async with self._lock():
            if self._token == token:
                reply = yield self._token_request()
                await reply.aread()
                self._store(reply)
            retry = self._token or token
        request.headers["Authorization"] = f"Bearer {retry}"
        yield request

    def _token_request(self) -> httpx2.Request:
        config = self.config
        secret = config.secrets["client_secret"]
        form = {"grant_type": "client_credentials"}
        if config.scopes:
            form["scope"] = " ".join(config.scopes)
        headers = {"Accept": "application/json"}
        if config.token_auth_method == "client_secret_post":
            form |= {"client_id": config.client_id or "", "client_secret": secret}
        else:
            headers["Authorization"] = _basic(_basic_pair(config.client_id or "", secret))
        request = httpx2.Request("POST", config.token_url or "", data=form, headers=headers)
        request.extensions["timeout"] = httpx2.Timeout(self._timeout).as_dict()
        return request

    def _store(self, response: httpx2.Response) -> str:
        """Take the token out of the endpoint's answer and cache it, or raise `TokenError`."""
        body = self.redactor.redact(response.text[:4000])
        if response.status_code >= 400:
            raise TokenError(
                f"The token endpoint answered HTTP {response.status_code}: check the connection's "
                f"client id and secret. {body}",
                status=response.status_code,
                body=body,
            )
        try:
            answer = json.loads(response.text)
            token = answer["access_token"]
            token_type = str(answer.get("token_type", "bearer"))
            lifetime = float(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError):
            answer, token, token_type, lifetime = None, None, "", 0.0
        if not isinstance(token, str) or not token or token_type.lower() != "bearer":
            raise TokenError(
                "The token endpoint did not answer with a bearer access token: check the token URL.",
                status=response.status_code,
                body=body,
            )
        self.redactor.add(token)
        self._token = token
        self._expires_at = self._clock() + max(lifetime - self._leeway, 0.0)
        return token


def connection_auth(
    config: AuthConfig, *, clock: Callable[[], float] = time.monotonic, timeout: float = 10.0
) -> ConnectionAuth:
    """The auth flow for a connection; share one per connection so its token cache is shared.

    Args:
        config: The connection's auth configuration (already validated).
        clock: Monotonic seconds for OAuth2 token expiry.
        timeout: Seconds for an OAuth2 token request.
    """
    if config.type == "oauth2_client_credentials":
        return OAuth2ClientCredentialsAuth(config, clock=clock, timeout=timeout)
    return ConnectionAuth(config)
