"""Tools the host implements itself: `current_time` and an allow-listed `fetch_url` (its HTTP client,
and httpx with it, is created by the first fetch: a host whose runners never fetch never loads it)."""

from __future__ import annotations

import asyncio
import datetime as dt
import zoneinfo
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from agentrunner.errors import (
    NotFoundError,
)
from agentrunner.v1 import common_pb2
from agentrunner_host.capabilities.tool_source import ToolInfo, ToolOutcome, text_outcome

if TYPE_CHECKING:
    import httpx


class NativeToolsConfig(BaseModel):
    """Host-native tools. `fetch_url` exists only when `fetch_url_allow` lists URL prefixes."""

    model_config = ConfigDict(extra="forbid")

    current_time: bool = True
    fetch_url_allow: list[str] = Field(default_factory=list)
    fetch_url_timeout: float = 15.0
    fetch_url_max_bytes: int = 1_000_000


class NativeToolSource:
    """Tools implemented by the host itself: `current_time` and an allow-listed `fetch_url`."""

    name = "native"

    def __init__(self, config: NativeToolsConfig, http_client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._client = http_client

    async def start(self) -> None:
        """Nothing to start: the HTTP client is made by the first `fetch_url` (`_http`)."""

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def list_tools(self) -> list[ToolInfo]:
        tools = []
        if self.config.current_time:
            tools.append(
                ToolInfo(
                    name="current_time",
                    description="The current date and time (ISO 8601) in a time zone.",
                    parameters={
                        "type": "object",
                        "properties": {
                            "timezone": {"type": "string", "description": "IANA time zone, default UTC"}
                        },
                    },
                    tool_type="native",
                    source=self.name,
                )
            )
        if self.config.fetch_url_allow:
            tools.append(
                ToolInfo(
                    name="fetch_url",
                    description="Fetches a web page or API response (only from allowed addresses) as text.",
                    parameters={
                        "type": "object",
                        "properties": {"url": {"type": "string", "description": "http(s) URL"}},
                        "required": ["url"],
                    },
                    tool_type="native",
                    source=self.name,
                )
            )
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], time_limit: float) -> ToolOutcome:
        if tool == "current_time" and self.config.current_time:
            zone = str(arguments.get("timezone") or "UTC")
            try:
                tz = zoneinfo.ZoneInfo(zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                return text_outcome(f"unknown time zone {zone!r}", is_error=True)
            now = dt.datetime.now(tz)
            return ToolOutcome(
                contents=[common_pb2.ContentElement(text=now.isoformat())],
                structured={"iso": now.isoformat(), "timezone": zone, "unix": now.timestamp()},
            )
        if tool == "fetch_url" and self.config.fetch_url_allow:
            return await self._fetch(str(arguments.get("url") or ""), time_limit)
        raise NotFoundError(f"tool {tool!r} does not exist")

    async def _fetch(self, url: str, time_limit: float) -> ToolOutcome:
        if not url.startswith(("http://", "https://")):
            return text_outcome("url must be an http(s) URL", is_error=True)
        if not any(url.startswith(prefix) for prefix in self.config.fetch_url_allow):
            return text_outcome(f"{url} is not in the host's allow-list", is_error=True)
        client = self._http()
        import httpx

        budget = min(time_limit, self.config.fetch_url_timeout)
        try:
            async with asyncio.timeout(budget), client.stream("GET", url, timeout=budget) as response:
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) >= self.config.fetch_url_max_bytes:
                        break
        except (httpx.TimeoutException, TimeoutError):
            return text_outcome(f"fetching {url} timed out", is_error=True)
        except httpx.HTTPError as exc:
            return text_outcome(f"fetching {url} failed: {type(exc).__name__}", is_error=True)
        mime = response.headers.get("content-type", "").split(";")[0].strip()
        if 300 <= response.status_code < 400:
            return text_outcome(f"{url} redirects to {response.headers.get('location')}", is_error=True)
        text = bytes(body[: self.config.fetch_url_max_bytes]).decode(response.encoding or "utf-8", "replace")
        return ToolOutcome(
            contents=[common_pb2.ContentElement(text=text)],
            structured={"status": response.status_code, "content_type": mime, "url": url},
            is_error=response.status_code >= 400,
        )
