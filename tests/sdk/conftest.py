"""Fixtures of the SDK suite: a host double per test (real gRPC on 127.0.0.1:0)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from agentrunner.testing import HostDouble


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble(heartbeat_interval=0.1) as double:
        yield double
