"""Builds the run context (PROTOCOL_V1 §5): event-first, nothing from history inlined.

The run start records the event first (`FactStores.record_event`) and reads the state snapshot; the
builder only projects what it is given: the event's position and attachment refs, the state of the
granted scopes and the resources of the frozen snapshot.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from agentrunner.errors import InvalidArgumentError
from agentrunner.protocol import PROTOCOL_VERSION
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, manifest_pb2
from agentrunner_host import __version__
from agentrunner_host.auth.authz import project_apis
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.config.runner_secrets import EnvRefError, resolve_env
from agentrunner_host.ports import AuthorizationSnapshot
from agentrunner_host.run import context_parity


@dataclasses.dataclass(frozen=True, slots=True)
class ContextPosition:
    """Where the event sits in the event log and transcript (from `FactStores.record_event`)."""

    latest_cursor: str = ""
    event_seq: int | None = None
    transcript_seq: int | None = None
    has_history_before: bool = False
    #: incoming attachments registered as artifacts, in order
    attachments: Sequence[common_pb2.ArtifactRef] = ()


class RunnerConfigError(InvalidArgumentError):
    """The agent's runner config does not satisfy the manifest's config schema."""


def _type_ok(field: manifest_pb2.ConfigField, value: Any) -> bool:
    t = field.type
    if value is None:
        return not field.required
    if t in (
        manifest_pb2.CONFIG_FIELD_TYPE_STRING,
        manifest_pb2.CONFIG_FIELD_TYPE_TEXT,
        manifest_pb2.CONFIG_FIELD_TYPE_SECRET,
        manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    ):
        return isinstance(value, str)
    if t == manifest_pb2.CONFIG_FIELD_TYPE_SELECT:
        return isinstance(value, str) and value in {o.name for o in field.options}
    if t == manifest_pb2.CONFIG_FIELD_TYPE_INTEGER:
        # manifest defaults arrive through `google.protobuf.Value`, where every number is a double
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) and not isinstance(value, bool)
    if t == manifest_pb2.CONFIG_FIELD_TYPE_NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if t == manifest_pb2.CONFIG_FIELD_TYPE_BOOLEAN:
        return isinstance(value, bool)
    if t in (
        manifest_pb2.CONFIG_FIELD_TYPE_STRING_LIST,
        manifest_pb2.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR,
    ):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if t == manifest_pb2.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR:
        return isinstance(value, str | list | dict)
    if t == manifest_pb2.CONFIG_FIELD_TYPE_PROMPT_EDITOR:
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    return True


def effective_runner_config(
    manifest: manifest_pb2.RunnerManifest, runner_config: Mapping[str, Any]
) -> dict[str, Any]:
    """The agent's runner config with `{env: NAME}` values read from the environment (`runner_secrets`)
    and schema defaults applied; raises RunnerConfigError naming the field."""
    try:
        out = resolve_env(manifest, runner_config)
    except EnvRefError as exc:
        raise RunnerConfigError(exc.message, field=exc.field) from None
    for field in manifest.config_schema:
        if field.name not in out and field.HasField("default_value"):
            out[field.name] = json_format.MessageToDict(field.default_value)
        if field.required and out.get(field.name) in (None, ""):
            raise RunnerConfigError(f"runner config field {field.name!r} is required", field=field.name)
        if field.name in out and not _type_ok(field, out[field.name]):
            raise RunnerConfigError(
                f"runner config field {field.name!r} has the wrong type", field=field.name
            )
    return out


def _json_safe(value: struct_pb2.Struct) -> struct_pb2.Struct:
    """Adapter extras must be JSON-safe; a Struct already is, but a round trip drops anything odd."""
    out = struct_pb2.Struct()
    out.update(json.loads(json.dumps(json_format.MessageToDict(value))))
    return out


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _set_ts(ts: timestamp_pb2.Timestamp, value: dt.datetime) -> None:
    """`ts.FromDatetime(value)` for an aware datetime, by arithmetic (a quarter of the time)."""
    delta = value - _EPOCH
    ts.seconds = delta.days * 86400 + delta.seconds
    ts.nanos = delta.microseconds * 1000


class ContextBuilder:
    """Projects one run's context. `adapter_actions` are the platform actions the host's delivery
    adapters implement (`Resources.platform_actions` = snapshot grant ∩ these)."""

    def __init__(self, adapter_actions: frozenset[str] = frozenset()) -> None:
        self.adapter_actions = adapter_actions

    async def build(
        self,
        *,
        event: host_service_pb2.EventEnvelope,
        agent: AgentConfig,
        snapshot: AuthorizationSnapshot,
        runner_config: Mapping[str, Any],
        trace_id: str,
        deadline_at: dt.datetime,
        resources: context_pb2.Resources,
        position: ContextPosition | None = None,
        state: Mapping[str, Mapping[str, Any]] | None = None,
        manifest: manifest_pb2.RunnerManifest | None = None,
    ) -> context_pb2.RunContext:
        ctx = context_pb2.RunContext(run_id=snapshot.run_id)
        position = position or ContextPosition()
        _project_event(ctx, event, position)
        ctx.delivery.CopyFrom(event.delivery)
        ctx.delivery.surface = agent.delivery_policy.surface or event.delivery.surface or "grpc"
        if agent.delivery_policy.streaming is not None:
            ctx.delivery.supports_streaming = agent.delivery_policy.streaming
        ctx.resources.CopyFrom(resources)
        _project_access(ctx.context, snapshot, position)
        if state and snapshot.state_scopes:
            for scope, values in state.items():
                if scope in snapshot.state_scopes:
                    getattr(ctx.state, scope).update(dict(values))
        _project_runtime(ctx, trace_id, deadline_at)
        if runner_config:
            ctx.config.update(json.loads(json.dumps(dict(runner_config))))
        if event.HasField("adapter_extra"):
            ctx.adapter.extra.CopyFrom(_json_safe(event.adapter_extra))
        if event.HasField("metadata"):
            ctx.metadata.CopyFrom(event.metadata)
        context_parity.apply(
            ctx,
            event=event,
            agent=agent,
            snapshot=snapshot,
            manifest=manifest,
            adapter_actions=self.adapter_actions,
        )
        return ctx


def _project_event(
    ctx: context_pb2.RunContext, event: host_service_pb2.EventEnvelope, position: ContextPosition
) -> None:
    """The trigger, the event, conversation, actor, subject and input of `ctx`."""
    ctx.trigger.type = event.event_type
    ctx.trigger.source = event.trigger_source or context_pb2.TRIGGER_SOURCE_API
    ctx.trigger.timestamp.CopyFrom(event.event_time)
    ev = ctx.event
    ev.event_id = event.event_id
    ev.event_type = event.event_type
    ev.event_time.CopyFrom(event.event_time)
    ev.source = event.source or "api"
    ev.source_event_type = event.source_event_type
    ev.data.CopyFrom(event.data)
    if event.HasField("conversation"):
        ctx.conversation.CopyFrom(event.conversation)
    ctx.conversation.bot_id = ctx.conversation.bot_id or event.bot_id
    ctx.conversation.workspace_id = ctx.conversation.workspace_id or event.workspace_id
    if event.HasField("actor"):
        ctx.actor.CopyFrom(event.actor)
    if event.HasField("subject"):
        ctx.subject.CopyFrom(event.subject)
    ctx.input.text = event.input.text
    ctx.input.contents.extend(event.input.contents)
    if position.attachments:
        # Bodies never travel in the context: attachments are artifact references (stored bodies are
        # read through the artifact RPCs; external URIs stay URIs).
        ctx.input.attachments.extend(position.attachments)
    else:
        for attachment in event.input.attachments:
            ref = ctx.input.attachments.add(name=attachment.name, mime_type=attachment.mime_type)
            if attachment.WhichOneof("source") == "uri":
                ref.uri = attachment.uri


def _project_access(
    access: context_pb2.ContextAccess, snapshot: AuthorizationSnapshot, position: ContextPosition
) -> None:
    """`ctx.context`: where the event sits, what is inlined (the event only) and the APIs granted."""
    access.conversation_id = snapshot.conversation_id
    access.thread_id = snapshot.thread_id
    access.latest_cursor = position.latest_cursor
    if position.event_seq is not None:
        access.event_seq = position.event_seq
    if position.transcript_seq is not None:
        access.transcript_seq = position.transcript_seq
    access.has_history_before = position.has_history_before
    access.inline_policy.mode = context_pb2.INLINE_MODE_CURRENT_EVENT
    access.inline_policy.delivered_count = 1
    access.inline_policy.messages_complete = False
    access.inline_policy.reason = "event-first: history is pulled through the proxy service, never inlined"
    access.available_apis.CopyFrom(project_apis(snapshot))


def _project_runtime(ctx: context_pb2.RunContext, trace_id: str, deadline_at: dt.datetime) -> None:
    """`ctx.runtime`: the host, protocol, trace, deadline and streaming support."""
    rt = ctx.runtime
    rt.host = "langbot-agentrunner-host"
    rt.protocol_version = PROTOCOL_VERSION
    rt.host_version = __version__
    rt.trace_id = trace_id
    if deadline_at.tzinfo is None:
        rt.deadline_at.FromDatetime(deadline_at)
    else:
        _set_ts(rt.deadline_at, deadline_at)
    rt.metadata.fields["streaming_supported"].bool_value = ctx.delivery.supports_streaming
