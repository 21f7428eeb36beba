"""Binding resolution: one event -> exactly one binding (PROTOCOL_V1 §13, never a fan-out)."""

from __future__ import annotations

import dataclasses

from agentrunner.errors import BindingNotFoundError, FailedPreconditionError, NotFoundError
from agentrunner_host.config.model import AgentConfig, BindingConfig, HostConfig

#: tie-break between matching bindings of equal priority in different scopes: the most specific wins
_SPECIFICITY = {"conversation": 3, "bot": 2, "workspace": 1, "global": 0}


@dataclasses.dataclass(frozen=True, slots=True)
class EventKey:
    """The event fields bindings match on."""

    event_type: str
    bot_id: str = ""
    workspace_id: str = ""
    conversation_id: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    binding_id: str
    agent: AgentConfig | None  # None: the binding discards the event

    @property
    def discarded(self) -> bool:
        return self.agent is None


def event_matches(pattern: str, event_type: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


def _scope_matches(binding: BindingConfig, key: EventKey) -> bool:
    scope = binding.scope
    if scope.type == "global":
        return True
    value = {"workspace": key.workspace_id, "bot": key.bot_id, "conversation": key.conversation_id}[
        scope.type
    ]
    return value == scope.id


class BindingResolver:
    def __init__(self, config: HostConfig) -> None:
        self._config = config
        self._bindings = sorted(
            (b for b in config.bindings if b.enabled),
            key=lambda b: (b.priority, _SPECIFICITY[b.scope.type]),
            reverse=True,
        )

    def resolve(self, key: EventKey, agent_id: str = "") -> Resolution:
        """The single binding for the event; explicit `agent_id` skips matching but not the agent checks."""
        if agent_id:
            agent = self._config.agent(agent_id)
            if agent is None:
                raise NotFoundError(f"agent {agent_id!r} does not exist", metadata={"agentId": agent_id})
            return Resolution(f"agent:{agent.id}", self._check_agent(agent, key))
        for binding in self._bindings:
            if event_matches(binding.event, key.event_type) and _scope_matches(binding, key):
                if binding.target.discard:
                    return Resolution(binding.id, None)
                agent = self._config.agent(binding.target.agent or "")
                assert agent is not None  # config validation guarantees targets exist
                return Resolution(binding.id, self._check_agent(agent, key))
        raise BindingNotFoundError(
            f"no enabled binding matches event type {key.event_type!r}",
            metadata={"eventType": key.event_type, "botId": key.bot_id, "workspaceId": key.workspace_id},
        )

    @staticmethod
    def _check_agent(agent: AgentConfig, key: EventKey) -> AgentConfig:
        if not agent.enabled:
            raise FailedPreconditionError(f"agent {agent.id!r} is disabled", metadata={"agentId": agent.id})
        if not any(event_matches(p, key.event_type) for p in agent.event_types):
            raise FailedPreconditionError(
                f"agent {agent.id!r} does not handle event type {key.event_type!r}",
                metadata={"agentId": agent.id, "eventType": key.event_type},
            )
        return agent
