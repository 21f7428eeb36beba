"""Proxy handlers over the host's fact stores (PROTOCOL_V1 §8, AGENT_CONTEXT_PROTOCOL §4).

History, events, artifacts, state, storage, prompt, steering and run records. Every handler checks
the request against `call.snapshot` only, names the resource it touched in `call.audit["resource"]`
and raises `AgentRunnerError` subclasses; the servicer maps them to statuses and records the audit.

Each area is a class whose methods are its handlers (`history`, `artifacts`, `keyvalue`, `inputs`,
`runs`); `fact_handlers` merges their tables. What they share is in `paging`.
"""

from __future__ import annotations

from agentrunner_host.proxy.api import StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.artifacts import Artifacts
from agentrunner_host.proxy.facts.history import ConversationReads
from agentrunner_host.proxy.facts.inputs import AgentInputs, PromptLookup
from agentrunner_host.proxy.facts.keyvalue import KeyValue
from agentrunner_host.proxy.facts.runs import AppendHook, CancelHook, RunRecords
from agentrunner_host.store.fact_stores import FactStores

__all__ = ["AppendHook", "CancelHook", "PromptLookup", "fact_handlers"]


def fact_handlers(
    stores: FactStores,
    *,
    prompt_lookup: PromptLookup | None = None,
    on_cancel: CancelHook | None = None,
    on_append: AppendHook | None = None,
) -> dict[str, UnaryHandler | StreamHandler]:
    """The handler table for the fact RPCs, to merge into the proxy servicer's table."""
    handlers: dict[str, UnaryHandler | StreamHandler] = {}
    for area in (
        ConversationReads(stores),
        Artifacts(stores),
        KeyValue(stores),
        AgentInputs(stores, prompt_lookup),
        RunRecords(stores, on_cancel=on_cancel, on_append=on_append),
    ):
        handlers.update(area.table())
    return handlers
