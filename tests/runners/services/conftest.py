"""Service-runner tests: each runner in-process behind the SDK's host double (real gRPC on loopback)
against the mock services (real HTTP on loopback, writes split at awkward byte boundaries).

The mock and the host double live as long as a test module (one event loop per module); each test
starts with an empty request record."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agentrunner.testing import HostDouble
from agentrunner_runners.testing.mock_services import MockServices


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def mock() -> AsyncIterator[MockServices]:
    async with MockServices() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble() as double:
        yield double


@pytest.fixture(autouse=True)
def _fresh_record(mock: MockServices) -> None:
    mock.recorder.requests.clear()
