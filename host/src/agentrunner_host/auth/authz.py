"""Run-scoped authorization (HOST_SDK §4.5, PROTOCOL_V1 §13).

The three-layer cut: manifest permissions ∩ the agent's resource policy ∩ the resources selected in the
agent's runner config (models, knowledge bases) or offered by the tool registry (tools). The result is frozen once, at run start, as the run's `AuthorizationSnapshot`;
`ctx.resources` and `ctx.context.available_apis` are projections of it and every proxy call is checked
against it. Nothing here is called again after the run starts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from agentrunner.v1 import common_pb2, context_pb2, manifest_pb2
from agentrunner_host.capabilities.models import MODEL_OPERATIONS
from agentrunner_host.config.model import AgentConfig, Selector
from agentrunner_host.ports import AuthorizationSnapshot, RunSession, hash_token
from agentrunner_host.proxy.capabilities import Backends, project_resources
from agentrunner_host.proxy.selectors import resolve_selectors

_MODEL_OPS = {
    manifest_pb2.MODEL_OPERATION_INVOKE: "invoke",
    manifest_pb2.MODEL_OPERATION_STREAM: "stream",
    manifest_pb2.MODEL_OPERATION_RERANK: "rerank",
    manifest_pb2.MODEL_OPERATION_COUNT_TOKENS: "count_tokens",
}
_TOOL_OPS = {manifest_pb2.TOOL_OPERATION_DETAIL: "detail", manifest_pb2.TOOL_OPERATION_CALL: "call"}
_KB_OPS = {
    manifest_pb2.KNOWLEDGE_OPERATION_LIST: "list",
    manifest_pb2.KNOWLEDGE_OPERATION_RETRIEVE: "retrieve",
}
_HISTORY_OPS = {manifest_pb2.HISTORY_OPERATION_PAGE: "page", manifest_pb2.HISTORY_OPERATION_SEARCH: "search"}
_EVENT_OPS = {manifest_pb2.EVENT_OPERATION_GET: "get", manifest_pb2.EVENT_OPERATION_PAGE: "page"}
_ARTIFACT_OPS = {
    manifest_pb2.ARTIFACT_OPERATION_METADATA: "metadata",
    manifest_pb2.ARTIFACT_OPERATION_READ: "read",
    manifest_pb2.ARTIFACT_OPERATION_WRITE: "write",
}
_STORAGE = {
    manifest_pb2.STORAGE_AREA_PLUGIN: "plugin",
    manifest_pb2.STORAGE_AREA_WORKSPACE: "workspace",
    manifest_pb2.STORAGE_AREA_BINDING: "binding",
}
STATE_SCOPE_NAMES = {
    common_pb2.STATE_SCOPE_CONVERSATION: "conversation",
    common_pb2.STATE_SCOPE_ACTOR: "actor",
    common_pb2.STATE_SCOPE_SUBJECT: "subject",
    common_pb2.STATE_SCOPE_RUNNER: "runner",
    common_pb2.STATE_SCOPE_BINDING: "binding",
    common_pb2.STATE_SCOPE_WORKSPACE: "workspace",
}


_RUN_OPS = {
    manifest_pb2.RUN_RECORD_OPERATION_GET: "get",
    manifest_pb2.RUN_RECORD_OPERATION_LIST: "list",
    manifest_pb2.RUN_RECORD_OPERATION_EVENTS_PAGE: "events_page",
    manifest_pb2.RUN_RECORD_OPERATION_CANCEL: "cancel",
    manifest_pb2.RUN_RECORD_OPERATION_APPEND_RESULT: "append_result",
    manifest_pb2.RUN_RECORD_OPERATION_FINALIZE: "finalize",
}

#: run token entropy in bytes (256 bits; the issue asks for at least 128)
TOKEN_BYTES = 32


EnumT = TypeVar("EnumT", bound=int)


def _names(values: Iterable[EnumT], table: Mapping[EnumT, str]) -> frozenset[str]:
    return frozenset(table[v] for v in values if v in table)


#: every operation / name set a snapshot holds, once: the sets come from the config and the manifests,
#: so runs of one agent have equal ones, and each run kept ~8 copies (~1.7 KiB per open run)
_SHARED: dict[frozenset[str], frozenset[str]] = {}
#: the empty set, once: `frozenset()` makes a new object on every call since Python 3.10 (no singleton),
#: and a run's snapshot held ~8 of them (1.7 KiB per open run, issue 37)
_EMPTY: frozenset[str] = frozenset()


def _shared(names: frozenset[str]) -> frozenset[str]:
    """The one instance of `names` (sets are immutable: sharing them changes nothing but memory)."""
    if not names:
        return _EMPTY
    return _SHARED.setdefault(names, names)


def _allowed(selector: Selector, resource_id: str) -> bool:
    return selector == "*" or resource_id in selector


@dataclasses.dataclass(frozen=True, slots=True)
class RunScope:
    """Who and where the run is for (copied into the snapshot)."""

    run_id: str
    binding_id: str
    event_id: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    bot_id: str = ""
    workspace_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    #: the event has a delivery target the runner may answer (`ContextApis.reply`)
    reply: bool = False


def freeze_snapshot(
    *,
    agent: AgentConfig,
    manifest: manifest_pb2.RunnerManifest,
    runner_config: Mapping[str, Any],
    scope: RunScope,
    deadline_at: dt.datetime,
    backends: Backends | None = None,
) -> AuthorizationSnapshot:
    """Cuts the three layers once. Models and knowledge bases: selected in the runner config (resolved
    against the host's backends) ∩ the agent's policy ∩ manifest permissions; tools: the tool registry's
    current tools ∩ the agent's policy ∩ manifest permissions."""
    perms = manifest.permissions
    policy = agent.resource_policy
    models: dict[str, frozenset[str]] = {}
    tools: dict[str, frozenset[str]] = {}
    kbs: dict[str, frozenset[str]] = {}
    if backends is not None:
        selected = resolve_selectors(manifest.config_schema, runner_config, backends)
        model_ops = _names(perms.models, _MODEL_OPS)
        for model_id in selected.llm_models:
            ops = model_ops & MODEL_OPERATIONS["llm"]
            if ops and _allowed(policy.models, model_id):
                models[model_id] = models.get(model_id, frozenset()) | ops
        for model_id in selected.rerank_models:
            ops = model_ops & MODEL_OPERATIONS["rerank"]
            if ops and _allowed(policy.models, model_id):
                models[model_id] = models.get(model_id, frozenset()) | ops
        tool_ops = _names(perms.tools, _TOOL_OPS)
        if tool_ops and backends.tools is not None:
            tools = {t.name: tool_ops for t in backends.tools.list_tools() if _allowed(policy.tools, t.name)}
        kb_ops = _names(perms.knowledge_bases, _KB_OPS)
        if kb_ops:
            kbs = {k: kb_ops for k in selected.knowledge_bases if _allowed(policy.knowledge_bases, k)}
    state_scopes = frozenset(STATE_SCOPE_NAMES[s] for s in perms.state if s in STATE_SCOPE_NAMES) & frozenset(
        agent.state_policy.scopes
    )
    return AuthorizationSnapshot(
        run_id=scope.run_id,
        runner_id=manifest.id,
        agent_id=agent.id,
        binding_id=scope.binding_id,
        event_id=scope.event_id,
        conversation_id=scope.conversation_id,
        thread_id=scope.thread_id,
        bot_id=scope.bot_id,
        workspace_id=scope.workspace_id,
        actor_id=scope.actor_id,
        subject_id=scope.subject_id,
        models={k: _shared(v) for k, v in models.items()},
        tools={k: _shared(v) for k, v in tools.items()},
        knowledge_bases={k: _shared(v) for k, v in kbs.items()},
        history=_shared(_names(perms.history, _HISTORY_OPS) if policy.history else frozenset()),
        events=_shared(_names(perms.events, _EVENT_OPS) if policy.events else frozenset()),
        artifacts=_shared(_names(perms.artifacts, _ARTIFACT_OPS) if policy.artifacts else frozenset()),
        artifact_upload_max_bytes=policy.artifact_upload_max_bytes,
        state_scopes=_shared(state_scopes),
        storage_areas=_shared(_names(perms.storage, _STORAGE) & frozenset(policy.storage)),
        runs=_shared(_names(perms.runs, _RUN_OPS) & frozenset(policy.runs)),
        platform_actions=_shared(frozenset(perms.platform_api) & frozenset(policy.platform_actions)),
        platform_bots=_shared(frozenset(policy.platform_bots)),
        reply=scope.reply,
        prompt=perms.prompt and policy.prompt,
        steering=manifest.capabilities.steering and policy.steering,
        cross_conversation=policy.cross_conversation,
        deadline_at=deadline_at,
    )


def project_snapshot_resources(
    snapshot: AuthorizationSnapshot, backends: Backends | None
) -> context_pb2.Resources:
    """`ctx.resources`: exactly what the snapshot grants, described by the backends (tools with their
    parameter schemas), plus the storage areas."""
    if backends is not None:
        out = project_resources(
            backends,
            models=snapshot.models,
            tools=snapshot.tools,
            knowledge_bases=snapshot.knowledge_bases,
        )
    else:
        out = context_pb2.Resources()
    out.storage.plugin_storage = "plugin" in snapshot.storage_areas
    out.storage.workspace_storage = "workspace" in snapshot.storage_areas
    out.storage.binding_storage = "binding" in snapshot.storage_areas
    return out


def project_apis(snapshot: AuthorizationSnapshot) -> context_pb2.ContextApis:
    """`ctx.context.available_apis` (permissions ∩ policy, from the snapshot)."""
    return context_pb2.ContextApis(
        history_page="page" in snapshot.history,
        history_search="search" in snapshot.history,
        event_get="get" in snapshot.events,
        event_page="page" in snapshot.events,
        artifact_metadata="metadata" in snapshot.artifacts,
        artifact_read="read" in snapshot.artifacts,
        artifact_write="write" in snapshot.artifacts,
        state=bool(snapshot.state_scopes),
        storage=bool(snapshot.storage_areas),
        prompt_get=snapshot.prompt,
        steering_pull=snapshot.steering,
        run_get="get" in snapshot.runs,
        run_list="list" in snapshot.runs,
        run_events_page="events_page" in snapshot.runs,
        run_cancel="cancel" in snapshot.runs,
        run_append_result="append_result" in snapshot.runs,
        run_finalize="finalize" in snapshot.runs,
        reply=snapshot.reply,
    )


def issue_session(snapshot: AuthorizationSnapshot, expires_at: dt.datetime) -> tuple[str, RunSession]:
    """A fresh random run token and the session that stores only its hash."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    session = RunSession(
        run_id=snapshot.run_id,
        token_hash=hash_token(token),
        runner_id=snapshot.runner_id,
        expires_at=expires_at,
        snapshot=snapshot,
    )
    return token, session
