"""Proxy handlers for models, tools and knowledge bases, plus the resource-builder helpers.

Each handler checks the request against the run's frozen authorization snapshot (`call.require`) and
then calls a backend; nothing here recomputes authorization. `project_*` builds the `ctx.resources`
entries the runner sees from the granted resources (which ids an agent's config selects is
`proxy/selectors.py`)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from google.protobuf import struct_pb2

from agentrunner.errors import InvalidArgumentError
from agentrunner.v1 import common_pb2, context_pb2, proxy_service_pb2
from agentrunner_host.capabilities.knowledge import KnowledgeService
from agentrunner_host.capabilities.models import MODEL_OPERATIONS, ModelRegistry, struct_to_dict
from agentrunner_host.capabilities.tool_source import ToolInfo
from agentrunner_host.capabilities.tools import ToolRegistry
from agentrunner_host.proxy.api import HandlerTable, ProxyCall


@dataclasses.dataclass(frozen=True, slots=True)
class AgentModelOptions:
    """Agent-level model options from the agent's config, applied host-side under the request's."""

    extra_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    remove_think: bool = False


#: (call, model_id) -> the agent's options for that model; the host core supplies it.
AgentModelOptionsFn = Callable[[ProxyCall, str], AgentModelOptions]


def _struct(data: Mapping[str, Any] | None) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    if data:
        out.update(dict(data))
    return out


def _model_allowed(call: ProxyCall, model_id: str, op: str) -> None:
    if not model_id:
        raise InvalidArgumentError("model_id is required", field="model_id")
    call.require(
        op in call.snapshot.models.get(model_id, ()), f"model {model_id} ({op})", f"model:{model_id}"
    )


def _tool_allowed(call: ProxyCall, name: str, op: str) -> None:
    if not name:
        raise InvalidArgumentError("tool_name is required", field="tool_name")
    call.require(op in call.snapshot.tools.get(name, ()), f"tool {name} ({op})", f"tool:{name}")


def _kb_allowed(call: ProxyCall, kb_id: str, op: str) -> None:
    if not kb_id:
        raise InvalidArgumentError("kb_id is required", field="kb_id")
    call.require(
        op in call.snapshot.knowledge_bases.get(kb_id, ()), f"knowledge base {kb_id} ({op})", f"kb:{kb_id}"
    )


def tool_definition(tool: ToolInfo) -> common_pb2.ToolDefinition:
    return common_pb2.ToolDefinition(
        name=tool.name, description=tool.description, parameters=_struct(tool.parameters)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _ModelHandlers:
    """`InvokeModel`, `StreamModel` (an async generator), `RerankDocuments`, `CountTokens`: the model
    registry under the agent's model options."""

    models: ModelRegistry
    agent_model_options: AgentModelOptionsFn | None

    def _options(self, call: ProxyCall, model_id: str) -> AgentModelOptions:
        return self.agent_model_options(call, model_id) if self.agent_model_options else AgentModelOptions()

    async def invoke_model(
        self, call: ProxyCall, request: proxy_service_pb2.InvokeModelRequest
    ) -> proxy_service_pb2.InvokeModelResponse:
        _model_allowed(call, request.model_id, "invoke")
        opts = self._options(call, request.model_id)
        return await self.models.invoke(
            request.model_id,
            request.messages,
            request.tools,
            struct_to_dict(request.extra_args),
            agent_extra_args=opts.extra_args,
            remove_think=request.remove_think or opts.remove_think,
            time_remaining=call.time_remaining(),
            run_id=call.run_id,
        )

    async def stream_model(
        self, call: ProxyCall, request: proxy_service_pb2.StreamModelRequest
    ) -> AsyncIterator[proxy_service_pb2.StreamModelResponse]:
        _model_allowed(call, request.model_id, "stream")
        opts = self._options(call, request.model_id)
        stream = self.models.stream(
            request.model_id,
            request.messages,
            request.tools,
            struct_to_dict(request.extra_args),
            agent_extra_args=opts.extra_args,
            remove_think=request.remove_think or opts.remove_think,
            time_remaining=call.time_remaining(),
            run_id=call.run_id,
        )
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    async def rerank_documents(
        self, call: ProxyCall, request: proxy_service_pb2.RerankDocumentsRequest
    ) -> proxy_service_pb2.RerankDocumentsResponse:
        _model_allowed(call, request.model_id, "rerank")
        results = await self.models.rerank(
            request.model_id,
            request.query,
            list(request.documents),
            request.top_k,
            struct_to_dict(request.extra_args),
            time_remaining=call.time_remaining(),
            run_id=call.run_id,
        )
        return proxy_service_pb2.RerankDocumentsResponse(
            results=[proxy_service_pb2.RerankResult(index=i, relevance_score=s) for i, s in results]
        )

    async def count_tokens(
        self, call: ProxyCall, request: proxy_service_pb2.CountTokensRequest
    ) -> proxy_service_pb2.CountTokensResponse:
        _model_allowed(call, request.model_id, "count_tokens")
        return self.models.count_tokens(request.model_id, request.messages, request.tools)


@dataclasses.dataclass(frozen=True, slots=True)
class _ToolHandlers:
    """`GetToolDetail`, `CallTool`: the tool registry."""

    tools: ToolRegistry

    async def get_tool_detail(
        self, call: ProxyCall, request: proxy_service_pb2.GetToolDetailRequest
    ) -> proxy_service_pb2.GetToolDetailResponse:
        _tool_allowed(call, request.tool_name, "detail")
        return proxy_service_pb2.GetToolDetailResponse(
            tool=tool_definition(self.tools.get(request.tool_name))
        )

    async def call_tool(
        self, call: ProxyCall, request: proxy_service_pb2.CallToolRequest
    ) -> proxy_service_pb2.CallToolResponse:
        _tool_allowed(call, request.tool_name, "call")
        call.audit["tool_call_id"] = request.tool_call_id or f"call_{uuid.uuid4().hex[:16]}"
        outcome = await self.tools.call(
            request.tool_name,
            struct_to_dict(request.parameters),
            run_id=call.run_id,
            time_remaining=call.time_remaining(),
        )
        response = proxy_service_pb2.CallToolResponse(
            contents=outcome.contents, is_error=outcome.is_error, truncated=outcome.truncated
        )
        if outcome.structured is not None:
            response.structured.CopyFrom(_struct(outcome.structured))
        if outcome.artifact is not None:
            response.artifact.CopyFrom(outcome.artifact)
        return response


@dataclasses.dataclass(frozen=True, slots=True)
class _KnowledgeHandlers:
    """`ListKnowledgeBases`, `RetrieveKnowledge`: the knowledge service."""

    knowledge: KnowledgeService

    async def list_knowledge_bases(
        self, call: ProxyCall, request: proxy_service_pb2.ListKnowledgeBasesRequest
    ) -> proxy_service_pb2.ListKnowledgeBasesResponse:
        granted = call.snapshot.knowledge_bases
        call.require(any("list" in ops for ops in granted.values()), "knowledge base listing", "kb:*")
        infos = {i.kb_id: i for i in self.knowledge.list_bases()}
        return proxy_service_pb2.ListKnowledgeBasesResponse(
            knowledge_bases=[
                context_pb2.KnowledgeBaseResource(
                    kb_id=kb_id, kb_name=infos[kb_id].name, kb_type=infos[kb_id].kind, operations=sorted(ops)
                )
                for kb_id, ops in sorted(granted.items())
                if "list" in ops and kb_id in infos
            ]
        )

    async def retrieve_knowledge(
        self, call: ProxyCall, request: proxy_service_pb2.RetrieveKnowledgeRequest
    ) -> proxy_service_pb2.RetrieveKnowledgeResponse:
        _kb_allowed(call, request.kb_id, "retrieve")
        call.time_remaining()
        found = await self.knowledge.search(
            request.kb_id, request.query_text, request.top_k, struct_to_dict(request.filters)
        )
        if found.degraded_reason:
            call.audit["degraded"] = found.degraded_reason
        return proxy_service_pb2.RetrieveKnowledgeResponse(
            results=[
                proxy_service_pb2.KnowledgeChunk(
                    document_id=c.document_id,
                    chunk_id=c.chunk_id,
                    content=c.content,
                    score=c.score,
                    metadata=_struct(c.metadata),
                )
                for c in found.chunks
            ],
            degraded_reason=found.degraded_reason,
        )


def capability_handlers(
    models: ModelRegistry,
    tools: ToolRegistry,
    knowledge: KnowledgeService,
    *,
    agent_model_options: AgentModelOptionsFn | None = None,
) -> HandlerTable:
    """The handler table for the model, tool and knowledge RPCs, one handler class per area."""
    m = _ModelHandlers(models, agent_model_options)
    t = _ToolHandlers(tools)
    k = _KnowledgeHandlers(knowledge)
    return {
        "InvokeModel": m.invoke_model,
        "StreamModel": m.stream_model,
        "RerankDocuments": m.rerank_documents,
        "CountTokens": m.count_tokens,
        "GetToolDetail": t.get_tool_detail,
        "CallTool": t.call_tool,
        "ListKnowledgeBases": k.list_knowledge_bases,
        "RetrieveKnowledge": k.retrieve_knowledge,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Backends:
    models: ModelRegistry
    tools: ToolRegistry | None = None
    knowledge: KnowledgeService | None = None


# --------------------------------------------------------------------------- projections


def project_models(
    models: ModelRegistry, granted: Mapping[str, Iterable[str]]
) -> list[context_pb2.ModelResource]:
    """`resources.models` for granted ids (operations limited to what the model type can serve)."""
    out = []
    for model_id, ops in granted.items():
        config = models.get(model_id)
        allowed = sorted(set(ops) & MODEL_OPERATIONS[config.model_type])
        if allowed:
            out.append(
                context_pb2.ModelResource(
                    model_id=model_id,
                    model_type=config.model_type,
                    provider=config.provider,
                    operations=allowed,
                    context_window_tokens=config.context_window,
                    vision=config.vision,
                )
            )
    return out


def project_tools(
    tools: ToolRegistry, granted: Mapping[str, Iterable[str]]
) -> list[context_pb2.ToolResource]:
    """`resources.tools` with parameter schemas inlined; tools not currently available are left out."""
    available = {t.name: t for t in tools.list_tools()}
    return [
        context_pb2.ToolResource(
            tool_name=name,
            tool_type=available[name].tool_type,
            description=available[name].description,
            operations=sorted(ops),
            parameters=_struct(available[name].parameters),
        )
        for name, ops in sorted(granted.items())
        if name in available and ops
    ]


def project_knowledge_bases(
    knowledge: KnowledgeService, granted: Mapping[str, Iterable[str]]
) -> list[context_pb2.KnowledgeBaseResource]:
    infos = {i.kb_id: i for i in knowledge.list_bases()}
    return [
        context_pb2.KnowledgeBaseResource(
            kb_id=kb_id, kb_name=infos[kb_id].name, kb_type=infos[kb_id].kind, operations=sorted(ops)
        )
        for kb_id, ops in sorted(granted.items())
        if kb_id in infos and ops
    ]


def project_resources(
    backends: Backends,
    *,
    models: Mapping[str, Iterable[str]] | None = None,
    tools: Mapping[str, Iterable[str]] | None = None,
    knowledge_bases: Mapping[str, Iterable[str]] | None = None,
) -> context_pb2.Resources:
    """The model/tool/knowledge part of `ctx.resources` from granted id -> operations maps (the same
    maps that go into the `AuthorizationSnapshot`)."""
    resources = context_pb2.Resources()
    if models:
        resources.models.extend(project_models(backends.models, models))
    if tools and backends.tools is not None:
        resources.tools.extend(project_tools(backends.tools, tools))
    if knowledge_bases and backends.knowledge is not None:
        resources.knowledge_bases.extend(project_knowledge_bases(backends.knowledge, knowledge_bases))
    return resources
