"""A plugin runner's discovery entry (`list_runners`) as this protocol's `RunnerManifest`.

- **id**: the runtime's `plugin:<author>/<plugin>/<runner>`, unchanged (an entry whose id this protocol
  cannot carry is skipped with a warning).
- **capabilities**: every flag both sides know is copied (`streaming`, `tool_calling`,
  `knowledge_retrieval`, `multimodal_input`, `skill_authoring`, `interrupt`, `steering`, `interactions`,
  and for the `AgentRunner` kind also the spec's other flags); `event_context` is always on.
- **permissions**: the plugin's `models`, `tools`, `knowledge_bases`, `history`, `events` and `storage`
  are copied (values this protocol does not know are dropped). The 0.7.x manifest cannot declare state,
  run records or the prompt, yet the SDK offers them to every runner (`ctx.state_*`, `ctx.run_*`,
  `ctx.get_prompt`) behind LangBot's host policy; so the bridge asks for them as the upper bound
  (state: conversation, actor, subject, runner; runs: all six; prompt) and the agent's resource and state
  policies in the host config decide, exactly as LangBot's binding policy does.
- **config schema**: LangBot's dynamic form items become `ConfigField`s (`FIELD_TYPES` below; a type this
  protocol does not know becomes `json`, which takes any native value); a `select` without options
  becomes a string; a default that does not fit its field's type is dropped (logged).
- **metadata** keeps the plugin's identity, version, component kind, usages and event patterns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from agentrunner.manifest import ManifestError, build_manifest, validate_manifest
from agentrunner.v1 import manifest_pb2
from agentrunner_runners.langbot_bridge.kinds import ComponentKind

log = structlog.get_logger("agentrunner_runners.langbot_bridge.manifest")

#: LangBot dynamic-form item type -> this protocol's config field type (shorthand names)
FIELD_TYPES: dict[str, str] = {
    "string": "string",
    "text": "text",
    "textarea": "text",
    "secret": "secret",
    "password": "secret",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "select": "select",
    "json": "json",
    "object": "json",
    "prompt-editor": "prompt_editor",
    "llm-model-selector": "llm_model_selector",
    "model-fallback-selector": "model_fallback_selector",
    "rerank-model-selector": "rerank_model_selector",
    "knowledge-base-multi-selector": "knowledge_base_multi_selector",
    "knowledge-base-selector": "string",
    "bot-selector": "string",
    "array[string]": "string_list",
    "string-list": "string_list",
    "tools-selector": "string_list",
}

_CAPABILITIES = frozenset(manifest_pb2.RunnerCapabilities.DESCRIPTOR.fields_by_name)
_PERMISSIONS: dict[str, frozenset[str]] = {
    "models": frozenset({"invoke", "stream", "rerank", "count_tokens"}),
    "tools": frozenset({"detail", "call"}),
    "knowledge_bases": frozenset({"list", "retrieve"}),
    "history": frozenset({"page", "search"}),
    "events": frozenset({"get", "page"}),
    "storage": frozenset({"plugin", "workspace", "binding"}),
    "artifacts": frozenset({"metadata", "read", "write"}),
    "files": frozenset({"config", "knowledge"}),
}
#: what every plugin runner may use through the SDK without declaring it (the host's policy decides)
_ALWAYS: dict[str, Any] = {
    "state": ["conversation", "actor", "subject", "runner"],
    "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
    "prompt": True,
}
_TYPE_CHECKS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "text": (str,),
    "secret": (str,),
    "select": (str,),
    "llm_model_selector": (str,),
    "rerank_model_selector": (str,),
    "integer": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "string_list": (list,),
    "knowledge_base_multi_selector": (list,),
    "prompt_editor": (list,),
}


def _i18n(value: Any, fallback: str) -> dict[str, str]:
    if isinstance(value, Mapping):
        out = {str(k): str(v) for k, v in value.items() if isinstance(v, str) and v}
        if out:
            return out
    if isinstance(value, str) and value:
        return {"en_US": value}
    return {"en_US": fallback}


def _capabilities(raw: Any) -> dict[str, bool]:
    caps = {k: bool(v) for k, v in raw.items() if k in _CAPABILITIES} if isinstance(raw, Mapping) else {}
    caps["event_context"] = True
    return caps


def _permissions(raw: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(_ALWAYS)
    if not isinstance(raw, Mapping):
        return out
    for key, allowed in _PERMISSIONS.items():
        values = raw.get(key)
        if isinstance(values, list):
            kept = [str(v) for v in values if str(v) in allowed]
            if kept:
                out[key] = sorted(set(kept))
    platform = raw.get("platform_api")
    if isinstance(platform, list):
        out["platform_api"] = [str(v) for v in platform if isinstance(v, str) and v]
    return out


def _option(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, Mapping) and raw.get("name") is not None:
        name = str(raw["name"])
        return {"name": name, "label": _i18n(raw.get("label"), name)}
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        return {"name": str(raw), "label": {"en_US": str(raw)}}
    return None


def _default(kind: str, value: Any, where: str) -> tuple[bool, Any]:
    """(keep, value): the default as this protocol's field type takes it."""
    if value is None:
        return False, None
    expected = _TYPE_CHECKS.get(kind)
    if expected is None:
        return True, value
    fits = isinstance(value, expected) and (kind == "boolean" or not isinstance(value, bool))
    if fits:
        return True, value
    if kind in ("integer", "number") and isinstance(value, str):
        try:
            return True, int(value) if kind == "integer" else float(value)
        except ValueError:
            pass
    log.warning("langbot.config_default_dropped", field=where, type=kind)
    return False, None


def config_field(raw: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """One dynamic-form item as a config field (shorthand), or None without a name."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        return None
    source_type = str(raw.get("type") or "string")
    kind = FIELD_TYPES.get(source_type, "json")
    options = [o for o in (_option(x) for x in raw.get("options") or []) if o is not None]
    if kind == "select" and not options:
        kind = "string"
    field: dict[str, Any] = {"name": name, "type": kind, "label": _i18n(raw.get("label"), name)}
    if raw.get("description"):
        field["description"] = _i18n(raw.get("description"), "")
    if raw.get("required") is True:
        field["required"] = True
    if kind == "select":
        field["options"] = options
    keep, value = _default(kind, raw.get("default"), f"{where}.{name}")
    if keep:
        field["default"] = value
    show_if = raw.get("show_if")
    if isinstance(show_if, Mapping) and isinstance(show_if.get("field"), str):
        field["show_if"] = {
            "field": show_if["field"],
            "operator": str(show_if.get("operator") or "eq"),
            "value": show_if.get("value"),
        }
    return field


def translate(entry: Mapping[str, Any], kind: ComponentKind) -> manifest_pb2.RunnerManifest:
    """The entry as a checked manifest; raises `ManifestError` when this protocol cannot carry it."""
    raw = entry.get("manifest") if isinstance(entry.get("manifest"), Mapping) else {}
    assert isinstance(raw, Mapping)
    author, plugin = str(entry.get("plugin_author") or ""), str(entry.get("plugin_name") or "")
    runner = str(entry.get("runner_name") or raw.get("name") or "")
    runner_id = str(raw.get("id") or f"plugin:{author}/{plugin}/{runner}")
    schema = raw.get("config_schema") if raw.get("config_schema") is not None else entry.get("config")
    fields = [
        f
        for f in (config_field(item, runner_id) for item in schema or [] if isinstance(item, Mapping))
        if f is not None
    ]
    permissions = _permissions(raw.get("permissions", entry.get("permissions")))
    history = permissions.get("history", [])
    shorthand: dict[str, Any] = {
        "id": runner_id,
        "label": _i18n(raw.get("label"), runner),
        "capabilities": _capabilities(raw.get("capabilities", entry.get("capabilities"))),
        "permissions": permissions,
        "context_policy": {
            "supports_history_pull": "page" in history,
            "supports_history_search": "search" in history,
        },
        "config": fields,
        "metadata": {
            "bridge": "langbot-plugins",
            "component_kind": kind.name,
            "plugin_author": author,
            "plugin_name": plugin,
            "plugin_version": str(entry.get("plugin_version") or ""),
            "runner_name": runner,
            "usages": list(raw.get("usages") or ["agent"]),
            "supported_event_patterns": list(raw.get("supported_event_patterns") or ["*"]),
        },
    }
    description = raw.get("description", entry.get("runner_description"))
    if description:
        shorthand["description"] = _i18n(description, "")
    manifest = build_manifest(shorthand)
    validate_manifest(manifest)
    return manifest


__all__ = ["FIELD_TYPES", "ManifestError", "config_field", "translate"]
