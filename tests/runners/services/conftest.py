"""Service-runner tests: each runner in-process behind the SDK's host double (real gRPC on loopback)
against the mock services (real HTTP on loopback, writes split at awkward byte boundaries)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from agentrunner.testing import HostDouble
from agentrunner_runners.testing.mock_services import MockServices


@pytest_asyncio.fixture
async def mock() -> AsyncIterator[MockServices]:
    async with MockServices() as server:
        yield server


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble() as double:
        yield double
