"""What a HostService client may reach, transport-neutral: the runs it may see, the events it may send,
the interactions it may answer and the artifacts it may read.

The gRPC servicer (`services/host_service.py`) admits each call first (`auth/clients.py:ClientGate`:
credentials, operation) and hands the services a `Caller`; `RunAccess` then checks the call's target
against the caller's scopes (`Principal.sees`, `Principal.may_use`). A run the caller may not see is
refused like one that does not exist would be for it (PERMISSION_DENIED either way: existence is not
disclosed). Every refusal goes through `Caller.refuse`, which records it in the audit log and raises
UNAUTHORIZED; a caller without a principal (no client gate: in-process use, tests of the run path)
may reach everything.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from agentrunner.errors import InvalidArgumentError, NotFoundError
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import host_service_pb2
from agentrunner_host.auth.clients import Principal
from agentrunner_host.delivery.store import InteractionStore
from agentrunner_host.ports import RunRecord
from agentrunner_host.registry.bindings import BindingResolver, EventKey, Resolution
from agentrunner_host.run.context_parity import check_envelope


class Refusal(Protocol):
    """Records a refused call (audit log) and raises UNAUTHORIZED (`ClientGate.refuse`, bound to the
    call's transport context, principal and method)."""

    async def __call__(self, message: str, *, resource: str, run_id: str = "") -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """One admitted client call as the services answering it see it."""

    #: who calls; None: a trusted caller (no client gate), which may reach every run
    principal: Principal | None = None
    #: how a refusal of this call is recorded and raised (unused for a trusted caller)
    refuse: Refusal | None = None

    async def refused(self, message: str, *, resource: str, run_id: str = "") -> None:
        """Raises the audited refusal (an `UnauthorizedError`)."""
        assert self.refuse is not None, "a caller with a principal has a refusal"
        await self.refuse(message, resource=resource, run_id=run_id)
        raise AssertionError("unreachable: the refusal raises")  # pragma: no cover


#: a caller with no client gate in front of it
TRUSTED = Caller()


class RunLookup(Protocol):
    """How access finds a run (`run.service.RunService.get_run`: NOT_FOUND for an unknown run)."""

    async def get_run(self, run_id: str) -> RunRecord: ...


def sees_every_run(principal: Principal) -> bool:
    """A client scoped to every bot and agent: NOT_FOUND tells it nothing it could not see."""
    return principal.bots == "*" and principal.agents == "*"


def event_key(event: host_service_pb2.EventEnvelope) -> EventKey:
    """The binding key of an event as the client sent it (ids on the event, else on its conversation)."""
    conv = event.conversation
    return EventKey(
        event.event_type or "message.received",
        bot_id=event.bot_id or conv.bot_id,
        workspace_id=event.workspace_id or conv.workspace_id,
        conversation_id=conv.conversation_id,
    )


class RunAccess:
    """The access checks of HostService's calls (see the module docstring)."""

    def __init__(
        self, runs: RunLookup, resolver: BindingResolver, interactions: InteractionStore | None = None
    ) -> None:
        self.runs = runs
        self.resolver = resolver
        self.interactions = interactions

    async def visible_run(self, caller: Caller, run_id: str) -> RunRecord:
        """The run, when the caller may see it (attach, get, cancel, answer, download)."""
        if not run_id:
            raise InvalidArgumentError("run_id is required", field="run_id")
        principal = caller.principal
        if principal is None:
            return await self.runs.get_run(run_id)
        record: RunRecord | None
        try:
            record = await self.runs.get_run(run_id)
        except NotFoundError:
            if sees_every_run(principal):
                raise  # a client that may see every run learns nothing from NOT_FOUND
            record = None
        if record is None or not principal.sees(record):
            await caller.refused(
                f"client {principal.client_id!r} may not see run {run_id!r}",
                resource=f"run:{run_id}",
                run_id=run_id,
            )
        assert record is not None
        return record

    async def admit_event(
        self, caller: Caller, request: host_service_pb2.HostServiceRunRequest
    ) -> Resolution | None:
        """The checks an event from a client passes before `RunService.open`: it is not an
        `interaction.submitted` event (those come from `SubmitInteraction` only), its envelope is
        consistent (`check_envelope`), and the bot and the agent it would reach are ones the caller may
        use. Returns the binding resolved for that check, which `RunService.open` takes as it is (None:
        a trusted caller; `open` resolves it itself)."""
        if request.event.event_type == INTERACTION_SUBMITTED_EVENT:
            raise InvalidArgumentError(
                "interaction.submitted events are created by SubmitInteraction only",
                field="event.event_type",
            )
        check_envelope(request.event)
        principal = caller.principal
        if principal is None:
            return None
        key = event_key(request.event)
        resolution = self.resolver.resolve(key, request.agent_id)
        agent = resolution.agent
        agent_id = agent.id if agent is not None else None
        if not principal.may_use(key.bot_id, agent_id):
            target = f"bot:{key.bot_id}" if agent_id is None else f"bot:{key.bot_id}/agent:{agent_id}"
            await caller.refused(
                f"client {principal.client_id!r} may not send events of bot {key.bot_id!r}"
                + (f" to agent {agent_id!r}" if agent_id else ""),
                resource=target,
            )
        return resolution

    async def answerable_interaction(self, caller: Caller, interaction_id: str) -> None:
        """An interaction the caller answers must belong to a run it may see (an unknown id is left to
        `InteractionService.submit`: NOT_FOUND, as for everyone)."""
        if caller.principal is None or not interaction_id or self.interactions is None:
            return
        row = await self.interactions.get(interaction_id)
        if row is not None:
            await self.visible_run(caller, row.run_id)

    async def readable_artifact(self, caller: Caller, artifact_id: str, run_id: str) -> None:
        """An artifact the caller downloads must belong to a run it may see; an artifact of no run only
        to a client that sees every run."""
        principal = caller.principal
        if principal is None:
            return
        if run_id:
            await self.visible_run(caller, run_id)
        elif not sees_every_run(principal):
            await caller.refused(
                f"client {principal.client_id!r} may not read artifact {artifact_id!r}",
                resource=f"artifact:{artifact_id}",
            )
