"""`RunHost`: what one run (`RunExecution`) uses of its host process, which `RunService` provides.

A protocol rather than the service's class, so the run object does not import the service that
creates it: `run/` has no import cycle, and a test can hand a run a host of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.config.model import HostConfig
from agentrunner_host.delivery.channel import DeliveryHub
from agentrunner_host.delivery.store import InteractionStore
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord, RunStore
from agentrunner_host.proxy.capabilities import Backends
from agentrunner_host.proxy.control import ControlHub
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run.context import ContextBuilder
from agentrunner_host.run.journal import DeltaBatcher
from agentrunner_host.run.validation import Limits


class RunHost(Protocol):
    """The host-wide parts a run reaches: configuration, runners, stores, hubs, the delta batcher."""

    config: HostConfig
    registry: RunnerRegistry
    stores: RunStore
    #: control streams (cancel signals, steering notices)
    hub: ControlHub
    #: the open runs' delivery channels
    deliveries: DeliveryHub
    interaction_store: InteractionStore
    backends: Backends | None
    #: the proxy address runners call back on
    proxy_endpoint: Callable[[], str]
    contexts: ContextBuilder
    limits: Limits
    #: the host-wide delta batcher (`run/journal.py`)
    batcher: DeltaBatcher

    def forget(self, run_id: str) -> None:
        """The run is released: it is no longer open in this process."""
        ...

    async def write_ending(
        self,
        snapshot: AuthorizationSnapshot,
        unwritten: list[result_pb2.RunResult],
        terminal: result_pb2.RunResult | None,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
    ) -> RunRecord | None:
        """Writes a run's ending that its journal did not: the results it could not write (`unwritten`,
        in order, the terminal among them), the final status (usage from `terminal`), the revoked
        token; raises the store's error."""
        ...

    def settle_later(
        self,
        snapshot: AuthorizationSnapshot,
        unwritten: list[result_pb2.RunResult],
        terminal: result_pb2.RunResult | None,
        status: common_pb2.RunStatus.ValueType,
        reason: str,
    ) -> None:
        """The run's ending could not be written (the database is away): the host writes it
        (`write_ending`) once the database takes writes again."""
        ...
