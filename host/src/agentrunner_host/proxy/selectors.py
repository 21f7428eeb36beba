"""What an agent's config selects: the model and knowledge base ids its manifest's selector fields
name (`resolve_selectors`), before permissions and policy are intersected (`authz.py`) and the
selected resources are projected into `ctx.resources` (`proxy/capabilities.py:project_resources`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from agentrunner.v1 import manifest_pb2
from agentrunner_host.proxy.capabilities import Backends

_SELECTOR_TYPES: dict[int, str] = {
    manifest_pb2.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR: "model-fallback-selector",
    manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR: "llm-model-selector",
    manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR: "rerank-model-selector",
    manifest_pb2.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR: "knowledge-base-multi-selector",
}


@dataclasses.dataclass(slots=True)
class SelectedResources:
    """What an agent's config selects, before permissions and policy are intersected.

    `llm_models` keeps the fallback order (primary first); unknown ids are listed in `unknown`."""

    llm_models: list[str] = dataclasses.field(default_factory=list)
    rerank_models: list[str] = dataclasses.field(default_factory=list)
    knowledge_bases: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)


def _field_name_type(field: Any) -> tuple[str, str]:
    if isinstance(field, manifest_pb2.ConfigField):
        return field.name, _SELECTOR_TYPES.get(field.type, "")
    if isinstance(field, Mapping):
        kind = field.get("type", "")
        if isinstance(kind, int):
            kind = _SELECTOR_TYPES.get(kind, "")
        return str(field.get("name", "")), str(kind).lower().replace("_", "-")
    return "", ""


def _default(field: Any) -> Any:
    if isinstance(field, manifest_pb2.ConfigField):
        return json_format.MessageToDict(field.default_value) if field.HasField("default_value") else None
    if isinstance(field, Mapping):
        return field.get("default")
    return None


def _ids(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        if "primary" in value or "fallbacks" in value:
            return [*_ids(value.get("primary")), *_ids(value.get("fallbacks"))]
        for key in ("uuid", "id", "model_id", "kb_id"):
            if key in value:
                return _ids(value[key])
        return []
    if isinstance(value, Iterable):
        return [i for v in value for i in _ids(v)]
    return []


#: the `config_schema` field types that select models or knowledge bases
_SELECTOR_KINDS = frozenset(
    {
        "model-fallback-selector",
        "llm-model-selector",
        "rerank-model-selector",
        "knowledge-base-multi-selector",
    }
)


def resolve_selectors(
    config_schema: Sequence[Any], runner_config: Mapping[str, Any], backends: Backends
) -> SelectedResources:
    """Maps selector fields of a manifest `config_schema` (protobuf `ConfigField`s or dicts with
    `name`/`type` as LangBot writes them) to the model and knowledge base ids the config selects."""
    selected = SelectedResources()
    known: tuple[dict[str, str], set[str]] | None = None  # read at the first field that selects
    for field in config_schema:
        name, kind = _field_name_type(field)
        if not kind or not name or kind not in _SELECTOR_KINDS:
            continue
        if known is None:
            known = (
                {c.id: c.model_type for c in backends.models.configs()},
                {i.kb_id for i in backends.knowledge.list_bases()} if backends.knowledge else set(),
            )
        known_models, known_kbs = known
        value = runner_config.get(name, _default(field))
        for item in _ids(value):
            if kind in ("model-fallback-selector", "llm-model-selector"):
                target, ok = selected.llm_models, known_models.get(item) == "llm"
            elif kind == "rerank-model-selector":
                target, ok = selected.rerank_models, known_models.get(item) == "rerank"
            elif kind == "knowledge-base-multi-selector":
                target, ok = selected.knowledge_bases, item in known_kbs
            else:
                continue
            if not ok:
                selected.unknown.append(item)
            elif item not in target:
                target.append(item)
    return selected
