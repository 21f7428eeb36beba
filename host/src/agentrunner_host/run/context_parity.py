"""The runner-context parts beyond PROTOCOL_V1 (LangBot runner context parity), set by the host.

- `RunContext.variables`: the agent's configured `variables` merged over the envelope's (the operator's
  value wins: a client cannot override what the operator pinned), then every sensitive key dropped
  (`agentrunner.protocol.is_sensitive_variable`, plus the names of the manifest's SECRET config
  fields), recursively inside nested objects. Dropped values are never logged; only a count is.
- `EventContext.platform_event`: the envelope's typed event (its member was checked against the event
  type before the run was accepted, see `check_envelope`), else parsed from `data` with the SDK's
  lenient parser for the stable types, so every runner sees the same typed event; `bot_id` is the
  run's bot.
- `Resources.skills` from the agent's config; `Resources.platform_actions` = the granted actions that a
  delivery adapter of this host implements (the snapshot keeps the grant itself, so a granted action
  without an adapter answers NOT_IMPLEMENTED rather than UNAUTHORIZED).
- `RunInput.interaction` on `interaction.submitted` runs (only `SubmitInteraction` creates those).
- `DeliveryContext.automatic_reply` / `.interactions` are the client's values (copied with `delivery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from google.protobuf import json_format

from agentrunner.errors import InvalidArgumentError
from agentrunner.events import EVENT_MEMBERS, parse_platform_event
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT, is_sensitive_variable
from agentrunner.v1 import context_pb2, host_service_pb2, manifest_pb2
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.ports import AuthorizationSnapshot

log = structlog.get_logger("agentrunner_host.context")


def secret_field_names(manifest: manifest_pb2.RunnerManifest | None) -> frozenset[str]:
    if manifest is None:
        return frozenset()
    return frozenset(
        f.name for f in manifest.config_schema if f.type == manifest_pb2.CONFIG_FIELD_TYPE_SECRET
    )


def _sensitive(key: str, secrets: frozenset[str]) -> bool:
    return is_sensitive_variable(key) or key in secrets


def _clean(value: Any, secrets: frozenset[str]) -> tuple[Any, int]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        dropped = 0
        for k, v in value.items():
            if _sensitive(str(k), secrets):
                dropped += 1
                continue
            out[str(k)], n = _clean(v, secrets)
            dropped += n
        return out, dropped
    if isinstance(value, list):
        items = [_clean(v, secrets) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0


def public_variables(
    envelope: Mapping[str, Any], configured: Mapping[str, Any], secrets: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], int]:
    """The variables a runner may see and how many keys were dropped (names never logged with values)."""
    merged = {**dict(envelope), **dict(configured)}
    cleaned, dropped = _clean(merged, secrets)
    return cleaned, dropped


def has_reply_target(event: host_service_pb2.EventEnvelope) -> bool:
    """`ContextApis.reply`: the event has a delivery target the runner may answer. Every `Run` /
    `SubmitInteraction` caller is one, except scheduler events without a conversation."""
    scheduled = (
        event.trigger_source == context_pb2.TRIGGER_SOURCE_SCHEDULER
        or event.event_type == "schedule.triggered"
    )
    return not (scheduled and not event.conversation.conversation_id)


def check_envelope(event: host_service_pb2.EventEnvelope) -> None:
    """Before a run is accepted: a typed platform event must match the event type."""
    member = event.platform_event.WhichOneof("event")
    if member is None:
        return
    expected = EVENT_MEMBERS.get(event.event_type or "message.received")
    if member != expected:
        raise InvalidArgumentError(
            f"platform_event.{member} does not match event type {event.event_type!r}",
            field="event.platform_event",
        )


def apply(
    ctx: context_pb2.RunContext,
    *,
    event: host_service_pb2.EventEnvelope,
    agent: AgentConfig,
    snapshot: AuthorizationSnapshot,
    manifest: manifest_pb2.RunnerManifest | None,
    adapter_actions: frozenset[str],
) -> None:
    if event.HasField("variables") or agent.variables:
        variables, dropped = public_variables(
            json_format.MessageToDict(event.variables) if event.HasField("variables") else {},
            agent.variables,
            secret_field_names(manifest),
        )
        if variables:
            ctx.variables.update(variables)
        if dropped:
            log.info("context.variables_filtered", dropped=dropped)
    if event.platform_event.WhichOneof("event"):
        ctx.event.platform_event.CopyFrom(event.platform_event)
    if event.event_type == INTERACTION_SUBMITTED_EVENT and event.platform_event.HasField(
        "interaction_submitted"
    ):
        ctx.input.interaction.CopyFrom(event.platform_event.interaction_submitted.submission)
    if not ctx.event.platform_event.WhichOneof("event"):
        parsed = parse_platform_event(ctx.event, ctx.input)
        if parsed is not None:
            if parsed.HasField("message_received") and not parsed.message_received.text:
                parsed.message_received.text = event.input.text
            ctx.event.platform_event.CopyFrom(parsed)
    if ctx.event.platform_event.WhichOneof("event") and not ctx.event.platform_event.bot_id:
        ctx.event.platform_event.bot_id = snapshot.bot_id
    for skill in agent.skills:
        ctx.resources.skills.add(
            skill_name=skill.name, display_name=skill.display_name, description=skill.description
        )
    ctx.resources.platform_actions.extend(sorted(snapshot.platform_actions & adapter_actions))
