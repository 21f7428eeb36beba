"""Entry adapter for legacy LangBot pipeline configs (issue item 8, PROTOCOL_V1 §12).

Old shape: `ai.runner.runner = "<legacy name>"` with each runner's settings under `ai.<legacy-name>`.
New shape: `ai.runner.id = "plugin:langbot/<name>-agent/default"` with settings under
`ai.runner_config[<id>]`. `migrate_pipeline` reads either shape (and mixtures), rewrites to the new one
and reports every change; `pipeline_to_agent` projects a migrated pipeline into a host agent.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

#: legacy `ai.runner.runner` value -> official runner id (OFFICIAL_RUNNER_PLUGINS §2)
LEGACY_RUNNERS: dict[str, str] = {
    "local-agent": "plugin:langbot/local-agent/default",
    "dify-service-api": "plugin:langbot/dify-agent/default",
    "n8n-service-api": "plugin:langbot/n8n-agent/default",
    "coze-api": "plugin:langbot/coze-agent/default",
    "dashscope-app-api": "plugin:langbot/dashscope-agent/default",
    "langflow-api": "plugin:langbot/langflow-agent/default",
    "tbox-app-api": "plugin:langbot/tbox-agent/default",
}


class MigrationError(ValueError):
    """The pipeline config cannot be migrated; the message names the path."""


@dataclasses.dataclass(slots=True)
class Migration:
    config: dict[str, Any]
    runner_id: str
    changes: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def migrate_pipeline(config: dict[str, Any]) -> Migration:
    """Rewrites a pipeline config to `ai.runner.id` + `ai.runner_config[id]`; the input is not modified."""
    out = copy.deepcopy(config)
    ai = out.get("ai")
    if not isinstance(ai, dict):
        raise MigrationError("ai: missing or not a mapping")
    runner = ai.get("runner")
    if runner is None:
        runner = ai["runner"] = {}
    if not isinstance(runner, dict):
        raise MigrationError("ai.runner: not a mapping")
    changes: list[str] = []
    runner_config = ai.get("runner_config")
    if runner_config is None:
        runner_config = {}
    elif not isinstance(runner_config, dict):
        raise MigrationError("ai.runner_config: not a mapping")
    legacy_name = runner.get("runner")
    runner_id = runner.get("id")
    if legacy_name is not None:
        if legacy_name not in LEGACY_RUNNERS:
            raise MigrationError(f"ai.runner.runner: unknown legacy runner {legacy_name!r}")
        mapped = LEGACY_RUNNERS[legacy_name]
        if runner_id and runner_id != mapped:
            raise MigrationError(f"ai.runner: id {runner_id!r} contradicts legacy runner {legacy_name!r}")
        runner_id = mapped
        del runner["runner"]
        runner["id"] = runner_id
        changes.append(f"ai.runner.runner={legacy_name!r} -> ai.runner.id={runner_id!r}")
    if not runner_id:
        raise MigrationError("ai.runner: neither `id` nor legacy `runner` is set")
    # Move every legacy section (not only the selected runner's) so no settings are lost.
    for name, target in LEGACY_RUNNERS.items():
        if name in ai:
            section = ai.pop(name)
            if not isinstance(section, dict):
                raise MigrationError(f"ai.{name}: not a mapping")
            existing = runner_config.get(target)
            if isinstance(existing, dict):
                merged = {**section, **existing}  # values already in the new shape win
                runner_config[target] = merged
                changes.append(f"ai.{name} merged into ai.runner_config[{target!r}] (new values kept)")
            else:
                runner_config[target] = section
                changes.append(f"ai.{name} -> ai.runner_config[{target!r}]")
    _pipeline_level_keys(out, runner_config, changes)
    if runner_config or "runner_config" in ai:
        ai["runner_config"] = runner_config
    return Migration(out, runner_id, changes)


#: Pipeline-level settings a runner now reads from its own config: (path, runner id, runner key).
PIPELINE_KEYS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("output", "misc", "remove-think"), LEGACY_RUNNERS["dify-service-api"], "remove-think"),
)


def _pipeline_level_keys(config: dict[str, Any], runner_config: dict[str, Any], changes: list[str]) -> None:
    """Copies pipeline-level settings into the runner configs that read them (values already set win)."""
    for path, target, key in PIPELINE_KEYS:
        value: Any = config
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        section = runner_config.get(target)
        if value is None or not isinstance(section, dict) or key in section:
            continue
        section[key] = value
        changes.append(f"{'.'.join(path)} -> ai.runner_config[{target!r}][{key!r}]")


def pipeline_to_agent(config: dict[str, Any], agent_id: str) -> dict[str, Any]:
    """A host agent (config `agents[]` entry) from a pipeline config in either shape."""
    migrated = migrate_pipeline(config)
    ai = migrated.config["ai"]
    output = migrated.config.get("output") or {}
    streaming = None
    if isinstance(output, dict):
        misc = output.get("misc") or {}
        if isinstance(misc, dict) and "stream" in misc:
            streaming = bool(misc["stream"])
    agent: dict[str, Any] = {
        "id": agent_id,
        "runner_id": migrated.runner_id,
        "runner_config": dict(ai.get("runner_config", {}).get(migrated.runner_id, {})),
        "event_types": ["message.received"],
    }
    timeout = agent["runner_config"].get("timeout")
    if isinstance(timeout, int | float) and timeout > 0:
        agent["timeout_seconds"] = float(timeout)
    if streaming is not None:
        agent["delivery_policy"] = {"streaming": streaming}
    return agent
