"""Checks of a host config beyond its own schema, run by `agentrunner-host config check` and at `serve`.

- every agent's `runner_config` against its runner's manifest `config_schema`: unknown keys (with the
  nearest declared name), wrong types and missing required fields, named by their path
  (`agents.1.runner_config.max-round`); selector values must name configured models / knowledge bases;
  a `{env: NAME}` value whose variable is unset is an error, a secret in plain text a warning
  (`runner_secrets`);
- agents whose runner no endpoint serves (the endpoint is down, or serves other runners);
- bindings that can never route an event: shadowed by a binding that always wins before them, or
  pointing at a disabled agent or one that handles none of the events they match.

The schema errors of the config itself stay in `config.parse_config` (they refuse to start). These
checks report `Problem`s: `config check` exits non-zero on any error, `serve` logs them as warnings
(a runner may be updated or come up later).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agentrunner.config import ConfigInvalid, check_value  # the runner side's own type rules
from agentrunner.v1 import manifest_pb2
from agentrunner_host.config.model import AgentConfig, BindingConfig, HostConfig
from agentrunner_host.config.runner_secrets import env_problems, env_ref

T = manifest_pb2.ConfigFieldType
#: runner_config keys the host itself reads (`server.agent_model_options`), whatever the schema says
HOST_KEYS = frozenset({"extra-args", "extra_args", "remove-think", "remove_think"})
_SPECIFICITY = {"conversation": 3, "bot": 2, "workspace": 1, "global": 0}


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    severity: Literal["error", "warning"]
    path: str
    message: str

    def line(self) -> str:
        return f"{self.severity}: {self.path}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointHealth:
    available: bool
    last_error: str
    runner_ids: Sequence[str]


def _agent_index(config: HostConfig) -> dict[str, int]:
    return {a.id: i for i, a in enumerate(config.agents)}


# -- runner_config against manifests -------------------------------------------------------------------
def _selector_ids(field: manifest_pb2.ConfigField, value: Any) -> list[str]:
    if field.type == T.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return [v for v in value if isinstance(v, str)]
        if isinstance(value, Mapping):
            fallbacks = value.get("fallbacks") or []
            return [v for v in [value.get("primary"), *fallbacks] if isinstance(v, str) and v]
    if field.type in (T.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR, T.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR):
        return [value] if isinstance(value, str) and value else []
    if field.type == T.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR and isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def check_runner_config(
    config: HostConfig, index: int, agent: AgentConfig, manifest: manifest_pb2.RunnerManifest
) -> list[Problem]:
    """`agents.<index>.runner_config` against `manifest.config_schema`."""
    where = f"agents.{index}.runner_config"
    schema = {f.name: f for f in manifest.config_schema}
    problems: list[Problem] = []
    for key, value in agent.runner_config.items():
        field = schema.get(key)
        if field is None:
            if key in HOST_KEYS:
                continue
            near = difflib.get_close_matches(key, list(schema), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; {manifest.id} declares {sorted(schema)}"
            problems.append(Problem("error", f"{where}.{key}", f"unknown key{hint}"))
            continue
        if value is None:
            continue
        secret_problems = env_problems(field, key, value)
        problems.extend(Problem(severity, f"{where}.{key}", message) for severity, message in secret_problems)
        if env_ref(value) is not None:
            continue  # its value is the variable's, checked by the runner when the run starts
        try:
            check_value(field, value)
        except ConfigInvalid as exc:
            problems.append(Problem("error", f"{where}.{key}", str(exc).split(": ", 1)[-1]))
            continue
        problems.extend(_selector_problems(config, f"{where}.{key}", field, value))
    for name, field in schema.items():
        if field.required and agent.runner_config.get(name) is None and not field.HasField("default_value"):
            problems.append(Problem("error", f"{where}.{name}", "is required by the runner's manifest"))
    return problems


def _selector_problems(
    config: HostConfig, path: str, field: manifest_pb2.ConfigField, value: Any
) -> list[Problem]:
    kinds = {m.id: m.kind for m in config.models}
    bases = {kb.id for kb in config.knowledge_bases}
    out = []
    for ref in _selector_ids(field, value):
        if field.type == T.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR:
            if ref not in bases:
                out.append(Problem("error", path, f"unknown knowledge base {ref!r} (not in knowledge_bases)"))
        elif ref not in kinds:
            out.append(Problem("error", path, f"unknown model {ref!r} (not in models)"))
        elif field.type == T.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR and kinds[ref] != "rerank":
            out.append(Problem("error", path, f"model {ref!r} is {kinds[ref]}, not a rerank model"))
        elif field.type != T.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR and kinds[ref] != "openai-chat":
            out.append(Problem("error", path, f"model {ref!r} is {kinds[ref]}, not a chat model"))
    return out


def check_against_registry(
    config: HostConfig,
    manifests: Mapping[str, manifest_pb2.RunnerManifest],
    endpoints: Mapping[str, EndpointHealth],
) -> list[Problem]:
    """Runner-dependent checks: endpoints down, agents whose runner nothing serves, runner configs."""
    problems: list[Problem] = []
    positions = {e.id: i for i, e in enumerate(config.runners)}
    for endpoint_id, health in endpoints.items():
        if not health.available:
            problems.append(
                Problem("warning", f"runners.{positions.get(endpoint_id, '?')}",
                        f"endpoint {endpoint_id!r} is down: {health.last_error or 'not reachable'}")
            )  # fmt: skip
    down = [e for e, h in endpoints.items() if not h.available]
    for i, agent in enumerate(config.agents):
        if not agent.enabled:
            continue
        manifest = manifests.get(agent.runner_id)
        if manifest is None:
            reason = f"; endpoints down: {', '.join(down)}" if down else ""
            problems.append(
                Problem("warning", f"agents.{i}.runner_id",
                        f"no runner endpoint serves {agent.runner_id!r}{reason} (its runs fail with runner.unavailable)")
            )  # fmt: skip
            continue
        problems.extend(check_runner_config(config, i, agent, manifest))
    return problems


# -- bindings ------------------------------------------------------------------------------------------
def _covers(a: str, b: str) -> bool:
    """Whether every event type matching pattern `b` matches pattern `a`."""
    if a == "*":
        return True
    if b == "*":
        return False
    if a.endswith(".*"):
        return b.startswith(a[:-1])
    return a == b


def _scope_covers(a: BindingConfig, b: BindingConfig) -> bool:
    return a.scope.type == "global" or (a.scope.type == b.scope.type and a.scope.id == b.scope.id)


def _overlaps(pattern: str, event_types: Sequence[str]) -> bool:
    from agentrunner_host.config.model import patterns_overlap

    return any(patterns_overlap(pattern, t) for t in event_types)


def check_bindings(config: HostConfig) -> list[Problem]:
    """Bindings that can never route an event to a run."""
    problems: list[Problem] = []
    enabled = [(i, b) for i, b in enumerate(config.bindings) if b.enabled]
    order = sorted(enabled, key=lambda p: (p[1].priority, _SPECIFICITY[p[1].scope.type]), reverse=True)
    rank = {i: n for n, (i, _) in enumerate(order)}
    for i, binding in enumerate(config.bindings):
        if not binding.enabled:
            continue
        shadow = next(
            (
                (j, other)
                for j, other in order[: rank[i]]
                if _scope_covers(other, binding) and _covers(other.event, binding.event)
            ),
            None,
        )
        if shadow is not None:
            j, other = shadow
            problems.append(
                Problem("warning", f"bindings.{i}",
                        f"{binding.id!r} never matches: bindings.{j} ({other.id!r}, priority {other.priority}, "
                        f"event {other.event!r}) wins every event it could match")
            )  # fmt: skip
            continue
        agent = config.agent(binding.target.agent or "") if binding.target.agent else None
        if agent is None:
            continue
        if not agent.enabled:
            problems.append(
                Problem(
                    "warning", f"bindings.{i}", f"{binding.id!r} routes to the disabled agent {agent.id!r}"
                )
            )
        elif not _overlaps(binding.event, agent.event_types):
            problems.append(
                Problem("warning", f"bindings.{i}",
                        f"{binding.id!r} matches {binding.event!r}, but agent {agent.id!r} handles only "
                        f"{agent.event_types}: every event it routes fails")
            )  # fmt: skip
    return problems


async def probe_registry(
    config: HostConfig,
) -> tuple[dict[str, manifest_pb2.RunnerManifest], dict[str, EndpointHealth]]:
    """Dials every runner endpoint once (the registry's own probe) for `config check`."""
    from agentrunner_host.registry.endpoints import RunnerRegistry

    registry = RunnerRegistry(config)
    try:
        await registry.refresh()
        return registry_view(registry)
    finally:
        await registry.close()


def registry_view(registry: Any) -> tuple[dict[str, manifest_pb2.RunnerManifest], dict[str, EndpointHealth]]:
    manifests = {r.runner_id: r.manifest for r in registry.runners()}
    endpoints = {
        e_id: EndpointHealth(e.available, e.last_error, list(e.runner_ids))
        for e_id, e in registry.endpoints.items()
    }
    return manifests, endpoints
