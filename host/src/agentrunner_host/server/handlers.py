"""The ProxyService's handler families (delivery, facts, capabilities) wired to one host's config,
stores and backends, with the agent-config lookups they need (the prompt, model options, the artifacts a
model request may reference). `HostApp.__init__` (`server/app.py`) calls `register_proxy_handlers`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentrunner.errors import NotFoundError, UnauthorizedError
from agentrunner.v1 import common_pb2
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.delivery.handlers import delivery_handlers
from agentrunner_host.proxy.capabilities import AgentModelOptions, capability_handlers
from agentrunner_host.proxy.facts import fact_handlers
from agentrunner_host.store.fact_stores import FactStores

if TYPE_CHECKING:
    from agentrunner_host.server.app import HostApp


def register_proxy_handlers(app: HostApp) -> None:
    """The ProxyService's handler families: delivery, facts (run records through the run service,
    so a run on another replica is reached through the fleet), capabilities."""
    app.proxy.register(
        delivery_handlers(
            app.runs.deliveries,
            app.adapters,
            app.stores.transcript,
            app.runs.deliveries.store,
            app.fleet,
            app.stores.ledger,
        )
    )
    app.proxy.register(
        fact_handlers(
            app.stores,
            prompt_lookup=lambda agent_id: agent_prompt(app.config.agent(agent_id)),
            on_cancel=app.runs.cancel_run,
            on_append=app.runs.append_to_open_run,
        )
    )
    app.proxy.register(
        capability_handlers(
            app.models,
            app.tools,
            app.knowledge,
            agent_model_options=lambda call, model_id: agent_model_options(
                app.config.agent(call.snapshot.agent_id), model_id
            ),
        )
    )


def agent_prompt(agent: AgentConfig | None) -> list[common_pb2.ModelMessage]:
    """`GetPrompt`: the agent config's `prompt` (messages, or one string taken as the system prompt)."""
    if agent is None or not agent.prompt:
        return []
    if isinstance(agent.prompt, str):
        return [common_pb2.ModelMessage(role="system", content=agent.prompt)]
    return [
        common_pb2.ModelMessage(role=str(m.get("role", "system")), content=str(m.get("content", "")))
        for m in agent.prompt
    ]


def agent_model_options(agent: AgentConfig | None, model_id: str) -> AgentModelOptions:
    """Model options the host applies for an agent: `model_options[<model id>]` (else `["*"]`), falling
    back to the LangBot runner-config keys `extra-args` / `remove-think`."""
    if agent is None:
        return AgentModelOptions()
    configured = agent.model_options.get(model_id) or agent.model_options.get("*")
    if configured is not None:
        return AgentModelOptions(dict(configured.extra_args), configured.remove_think)
    rc = agent.runner_config
    extra = rc.get("extra-args", rc.get("extra_args"))
    remove = rc.get("remove-think", rc.get("remove_think"))
    return AgentModelOptions(dict(extra) if isinstance(extra, dict) else {}, remove is True)


async def artifact_for_model(stores: FactStores, run_id: str, artifact_id: str) -> tuple[bytes, str]:
    """`artifact://` image URIs in model requests: only artifacts the run may read, whole (capped)."""
    row = await stores.artifacts.get(artifact_id)
    run = await stores.ledger.get_run(run_id)
    if row is None or run is None:
        raise NotFoundError("artifact not found", metadata={"artifactId": artifact_id})
    visible = row.run_id == run_id or (run.conversation_id and row.conversation_id == run.conversation_id)
    if not visible:
        raise UnauthorizedError(
            "the artifact belongs to another conversation", metadata={"resource": f"artifact:{artifact_id}"}
        )
    chunks: Sequence[bytes] = [chunk async for _, chunk in stores.artifacts.iter_chunks(row)]
    return b"".join(chunks), row.mime_type
