"""HTTP to external services: one pooled `httpx.AsyncClient` per runner process, typed failures.

`Upstream` is one run's view of a service: every request it makes has the config's timeout clipped by
the run's remaining time, maps non-2xx answers and transport failures to `ServiceError`
(`<provider>.<reason>`), and reads bodies in the streaming shapes services use (SSE through
`httpx-sse`, JSON sequences, JSON lines, a whole JSON body) with size caps. Closing the response (the
`async with` block ending, or the run being cancelled inside it) closes the upstream request at once:
an unfinished body is never drained, the connection is dropped and the service sees the disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from agentrunner.services.errors import (
    Redactor,
    ServiceError,
    find_message,
    from_http_status,
    from_transport,
    parse_retry_after,
)
from agentrunner.services.parsers import BodyTooLarge, InvalidJson, JsonLines, JsonSequence

__all__ = [
    "DEFAULT_MAX_BODY",
    "Upstream",
    "close_http_clients",
    "http_client",
]

#: Largest whole body read into memory (JSON answers, error bodies are read up to `_ERROR_BODY`).
DEFAULT_MAX_BODY = 16 << 20
_ERROR_BODY = 64 << 10
#: Upper bound of the connect timeout (a service that does not accept within it is down).
_CONNECT_TIMEOUT = 10.0
_LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=40, keepalive_expiry=30.0)

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)

JsonErrorHook = Callable[[Any, int], "ServiceError | None"]


def http_client() -> httpx.AsyncClient:
    """The process's HTTP client for the running event loop (pooled connections, HTTP/2 over TLS)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(
            http2=True,
            limits=_LIMITS,
            timeout=httpx.Timeout(60.0, connect=_CONNECT_TIMEOUT),
            follow_redirects=False,
            headers={"user-agent": "langbot-agentrunner-services/1"},
        )
        _clients[loop] = client
    return client


async def close_http_clients() -> None:
    """Closes the running loop's client (runner servers call it on shutdown)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


class Upstream:
    """One run's requests to one service.

    `timeout` is the per-operation timeout from the runner config (connect, each read, each write);
    it is clipped by `remaining()` (the run's time left). `redact` scrubs secrets from every message.
    `json_error` turns a JSON body that arrived where a stream was expected (or a 2xx JSON body that is
    a business error) into the service's own `ServiceError`; return None to accept the body.
    """

    def __init__(
        self,
        provider: str,
        *,
        timeout: float,
        remaining: Callable[[], float | None] = lambda: None,
        redact: Redactor | None = None,
        json_error: JsonErrorHook | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.provider = provider
        self._timeout = timeout
        self._remaining = remaining
        self.redact = redact or Redactor()
        self._json_error = json_error
        self._client = client
        self.requests = 0

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client to use: the one given (tests), else the process's pooled client for this loop."""
        return self._client or http_client()

    def timeout(self) -> httpx.Timeout:
        """The config timeout clipped by the run's remaining time (fails when none is left)."""
        value = self._timeout
        left = self._remaining()
        if left is not None:
            if left <= 0:
                raise ServiceError(self.provider, "timeout", "the run deadline passed before the request")
            value = min(value, left)
        return httpx.Timeout(value, connect=min(value, _CONNECT_TIMEOUT))

    def error(self, reason: str, message: str, **kwargs: Any) -> ServiceError:
        """A `ServiceError` of this provider with a redacted message."""
        return ServiceError(self.provider, reason, self.redact(message), **kwargs)

    # -- requests -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        """Sends a request and yields the response with its body unread; non-2xx raise `ServiceError`.

        Keyword arguments go to `httpx.AsyncClient.build_request` (`json`, `data`, `files`, `headers`,
        `params`, `auth`, ...). Leaving the block closes the response (and the connection if the body
        was not read to its end).
        """
        timeout = kwargs.pop("timeout", None) or self.timeout()
        auth = kwargs.pop("auth", None)
        try:
            request = self.client.build_request(method, url, timeout=timeout, **kwargs)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise self.error("config_invalid", f"invalid URL {url!r}: {exc}") from None
        self.requests += 1
        try:
            response = await self.client.send(request, stream=True, auth=auth)
        except httpx.UnsupportedProtocol as exc:
            raise self.error("config_invalid", f"invalid URL {url!r}: {exc}") from None
        except httpx.TransportError as exc:
            raise self._transport(exc, started=False) from None
        try:
            if not response.is_success:
                body = await self._read_capped(response, _ERROR_BODY, tolerate=True)
                error = self._status_error(response, body)
                raise error
            yield response
        except asyncio.CancelledError:
            _abort(response)  # at once, whatever happens to the awaits below
            raise
        finally:
            await _close(response)

    async def request(
        self, method: str, url: str, *, max_body: int = DEFAULT_MAX_BODY, **kwargs: Any
    ) -> httpx.Response:
        """Sends a request and reads the whole body (up to `max_body` bytes) into `response.content`."""
        async with self.stream(method, url, **kwargs) as response:
            body = await self._read_capped(response, max_body)
            return httpx.Response(
                response.status_code, headers=response.headers, content=body, request=response.request
            )

    # -- bodies -------------------------------------------------------------------------------

    async def chunks(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive; a transport failure mid-body is `connection_lost`/`timeout`."""
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TransportError as exc:
            raise self._transport(exc, started=True) from None
        except httpx.DecodingError as exc:
            raise self.error("response_invalid", f"the body cannot be decoded: {exc}") from None

    async def sse(self, response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
        """Server-sent events (`httpx-sse`); a JSON body instead of a stream goes through `json_error`."""
        if _is_json(response):
            await self._json_instead_of_stream(response)
            return
        source = EventSource(response)
        events = source.aiter_sse()
        try:
            async for event in events:
                yield event
        except SSEError as exc:
            raise self.error("response_invalid", f"not an event stream: {exc}") from None
        except httpx.TransportError as exc:
            raise self._transport(exc, started=True) from None
        finally:
            await events.aclose()

    async def json_values(
        self, response: httpx.Response, parser: JsonSequence | JsonLines | None = None
    ) -> AsyncIterator[Any]:
        """JSON values of a streamed body (`JsonSequence` by default) as each one completes."""
        parser = parser or JsonSequence()
        try:
            async for chunk in self.chunks(response):
                for value in parser.feed(chunk):
                    yield value
            for value in parser.close():
                yield value
        except InvalidJson as exc:
            raise self.error("response_invalid", f"{exc} near {exc.excerpt[:80]!r}") from None
        except BodyTooLarge as exc:
            raise self.error("response_invalid", str(exc)) from None

    async def read_json(self, response: httpx.Response, *, max_body: int = DEFAULT_MAX_BODY) -> Any:
        """The whole body as one JSON value (pretty-printed or not); invalid JSON is `response_invalid`."""
        body = await self._read_capped(response, max_body)
        try:
            return json.loads(body.decode("utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            excerpt = body[:80].decode("utf-8", errors="replace")
            raise self.error("response_invalid", f"invalid JSON body ({exc.msg}) near {excerpt!r}") from None

    @staticmethod
    def is_json(response: httpx.Response) -> bool:
        """Whether the body is JSON (`application/json` or `…+json`): a whole answer or error body
        where a service may also send a stream."""
        return _is_json(response)

    def check_json(self, data: Any, status: int = 200) -> None:
        """Raises the service's business error carried by a JSON body, if `json_error` finds one."""
        if self._json_error is not None:
            error = self._json_error(data, status)
            if error is not None:
                raise error

    # -- internals ----------------------------------------------------------------------------

    async def _json_instead_of_stream(self, response: httpx.Response) -> None:
        data = await self.read_json(response, max_body=_ERROR_BODY)
        self.check_json(data, response.status_code)
        message = find_message(data) or "the service answered with JSON instead of an event stream"
        raise self.error("api_error", message, status=response.status_code)

    async def _read_capped(self, response: httpx.Response, limit: int, *, tolerate: bool = False) -> bytes:
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    if tolerate:
                        break
                    raise self.error("response_invalid", f"the response body is larger than {limit} bytes")
                parts.append(chunk)
        except httpx.TransportError as exc:
            if tolerate:
                return b"".join(parts)
            raise self._transport(exc, started=True) from None
        return b"".join(parts)

    def _status_error(self, response: httpx.Response, body: bytes) -> ServiceError:
        if _is_json(response) and self._json_error is not None:
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                error = self._json_error(json.loads(body), response.status_code)
                if error is not None:
                    _with_retry_after(error, response)
                    error.message = self.redact(error.message)
                    return error
        error = from_http_status(self.provider, response.status_code, response.headers, body)
        error.message = self.redact(error.message)
        return error

    def _transport(self, exc: httpx.TransportError, *, started: bool) -> ServiceError:
        error = from_transport(self.provider, exc, started=started)
        error.message = self.redact(error.message)
        return error


def _abort(response: httpx.Response) -> None:
    """Shuts the connection's socket down without waiting, so the service sees the disconnect now: when
    a host cancel signal and the call's cancellation arrive together, httpx's close can return with the
    connection still open (seen in tests: the mock never saw the client go away)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None  # asyncio's TransportSocket
    if sock is not None and hasattr(sock, "shutdown"):
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_RDWR)


async def _close(response: httpx.Response) -> None:
    """Closes the response (and its connection, when the body was not read to its end), even when the
    run is cancelled again meanwhile (a host cancel signal and the call's cancellation often arrive
    together): an interrupted close would leave the upstream request open."""
    closing = asyncio.ensure_future(response.aclose())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        if not closing.done():
            await asyncio.wait({closing}, timeout=5.0)
        raise


def _with_retry_after(error: ServiceError, response: httpx.Response) -> None:
    """Adds the `Retry-After` hint of a rate-limited or unavailable answer to a runner-made error."""
    wait = parse_retry_after(response.headers.get("retry-after"))
    if wait is None or error.retry_after is not None:
        return
    error.retry_after = wait
    if error.status is None:
        error.status = response.status_code
    error.message += f"; retry after {wait:g} s"


def _is_json(response: httpx.Response) -> bool:
    kind: str = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def header_items(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """Header pairs without empty values (config fields left blank send nothing)."""
    return [(k, v) for k, v in headers.items() if v]
