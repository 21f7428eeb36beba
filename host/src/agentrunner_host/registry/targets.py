"""Where a run's runner call goes (`CallTarget`: a dialed endpoint, or a runtime that dialed in), and
what the runner registry asks of the runtimes (`RuntimePlacement`, `runtimes/registry.py`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

import grpc

from agentrunner.v1 import runner_service_pb2

RunCall = grpc.aio.UnaryStreamCall[runner_service_pb2.RunRequest, runner_service_pb2.RunResponse]


class RuntimePlacement(Protocol):
    """The runtimes that dial in (`runtimes/registry.py`), as the runner registry consults them."""

    def serves(self, runner_id: str) -> bool: ...

    async def place(self, runner_id: str, selector: dict[str, str]) -> tuple[Any, str]: ...

    async def takes(self, runner_id: str, selector: dict[str, str]) -> bool: ...

    async def elsewhere(
        self, runner_id: str, selector: dict[str, str], live: Collection[str]
    ) -> list[str]: ...


class CallTarget(Protocol):
    """What a run's runner call is sent to: a dialed endpoint or a runtime that dialed in."""

    @property
    def address(self) -> str: ...

    def start_call(
        self, request: runner_service_pb2.RunRequest, *, timeout: float, metadata: Sequence[tuple[str, str]]
    ) -> RunCall: ...
