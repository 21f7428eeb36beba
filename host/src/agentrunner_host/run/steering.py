"""Steering: new input for a conversation (and thread) whose open run accepts it goes into that run
instead of starting a second one.

A run accepts steering when its runner declares the `steering` capability and the agent's
`resource_policy.steering` is on (both frozen in the snapshot). The event is recorded (event log +
transcript user message, owned by the open run), queued in the steering store (`PullSteering`, any
replica) and pushed on the run's control stream. Input the run never consumed is claimed when it ends
(`RunExecution.release`), so a later run never receives stale steering.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import structlog

from agentrunner.v1 import host_service_pb2, proxy_service_pb2
from agentrunner_host.ports import RunStore
from agentrunner_host.proxy.control import ControlHub

if TYPE_CHECKING:
    from agentrunner_host.run.execution import RunExecution

log = structlog.get_logger("agentrunner_host.run")


class Steerable(Protocol):
    """An open run as steering sees it (`run.execution.RunExecution`)."""

    def steerable(self) -> bool: ...

    def last_sequence(self) -> int: ...


def steerable_run(
    runs: Iterable[RunExecution], conversation_id: str, thread_id: str, agent_id: str
) -> RunExecution | None:
    """The open run of this conversation / thread and of the agent the event is for that accepts
    steering, if any (an event for another agent starts that agent's run: it is never read by a run of
    an agent it was not addressed to)."""
    if not conversation_id:
        return None
    for run in runs:
        rec = run.record
        if (
            rec.conversation_id == conversation_id
            and rec.thread_id == thread_id
            and rec.agent_id == agent_id
            and run.steerable()
        ):
            return run
    return None


def steering_item(event: host_service_pb2.EventEnvelope) -> proxy_service_pb2.SteeringInput:
    item = proxy_service_pb2.SteeringInput(steering_id=f"steer_{uuid.uuid4().hex[:16]}")
    item.event.event_id = event.event_id
    item.event.event_type = event.event_type
    item.event.event_time.CopyFrom(event.event_time)
    item.event.source = event.source or "api"
    item.input.text = event.input.text
    item.input.contents.extend(event.input.contents)
    if event.platform_event.HasField("interaction_submitted"):
        # an answer to a question the open run asked (a harness waiting in its turn reads it here)
        item.input.interaction.CopyFrom(event.platform_event.interaction_submitted.submission)
    if event.HasField("actor"):
        item.actor.CopyFrom(event.actor)
    item.receive_time.GetCurrentTime()
    return item


async def steer(
    store: RunStore, hub: ControlHub, run: RunExecution, event: host_service_pb2.EventEnvelope
) -> str | None:
    """Queues a (normalized) event into an open run that accepts steering; the steering id, or None for
    a redelivered event (it was queued the first time)."""
    rec = run.record
    recorded = await store.record_event(
        event, run_id=rec.run_id, runner_id=rec.runner_id, binding_id=rec.binding_id
    )
    item = steering_item(event)
    item.input.attachments.extend(recorded.attachments)
    if not recorded.created:
        return None
    stored = await store.steering.enqueue(
        conversation_id=rec.conversation_id, thread_id=rec.thread_id, item=item
    )
    hub.send_steering(rec.run_id, stored)
    log.info("run.steered", run_id=rec.run_id, event_id=event.event_id, steering_id=stored.steering_id)
    return stored.steering_id
