"""Runner manifests: written as a short dict or YAML file, checked strictly, turned into the contract's
`RunnerManifest`.

The shorthand is only a spelling of the proto (no parallel schema): enum values are written in lower
case without their prefix (`history: [page]`, `state: [conversation]`, `type: integer`), capabilities as a
list of names, labels as a string (`en_US`) or a dict of translations. Everything else goes through
`google.protobuf.json_format.ParseDict`, which rejects unknown fields.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from google.protobuf import descriptor, json_format

from agentrunner.protocol import PROTOCOL_VERSION, RUNNER_ID_PATTERN
from agentrunner.v1 import common_pb2, manifest_pb2

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

RunnerManifest = manifest_pb2.RunnerManifest

_DEFAULT_LOCALE = "en_US"
#: field types whose value is a string (the ones a `pattern` applies to)
_STRING_FIELDS = frozenset(
    {
        manifest_pb2.CONFIG_FIELD_TYPE_STRING,
        manifest_pb2.CONFIG_FIELD_TYPE_TEXT,
        manifest_pb2.CONFIG_FIELD_TYPE_SECRET,
        manifest_pb2.CONFIG_FIELD_TYPE_SELECT,
        manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    }
)


class ManifestError(ValueError):
    """The manifest is malformed (raised when the runner is loaded, never at run time)."""


def _enum_prefix(enum: descriptor.EnumDescriptor) -> str:
    return enum.values_by_number[0].name.removesuffix("UNSPECIFIED")


def _enum_name(enum: descriptor.EnumDescriptor, value: Any, where: str) -> str:
    """`page` -> `HISTORY_OPERATION_PAGE` (full names and numbers pass through)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in enum.values_by_number:
            raise ManifestError(f"{where}: unknown value {value}")
        return enum.values_by_number[value].name
    if not isinstance(value, str):
        raise ManifestError(f"{where}: expected a string, got {type(value).__name__}")
    if value in enum.values_by_name:
        return value
    full = _enum_prefix(enum) + value.upper().replace("-", "_").replace(".", "_")
    if full not in enum.values_by_name or enum.values_by_name[full].number == 0:
        allowed = [v.name.removeprefix(_enum_prefix(enum)).lower() for v in enum.values if v.number]
        raise ManifestError(f"{where}: unknown value {value!r} (allowed: {', '.join(allowed)})")
    return full


def _i18n(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"translations": {_DEFAULT_LOCALE: value}}
    if isinstance(value, Mapping) and "translations" not in value:
        return {"translations": dict(value)}
    return dict(value)


def _normalize_message(message: descriptor.Descriptor, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Expands the shorthand of one message level (recursively) into proto JSON."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = message.fields_by_name.get(key) or message.fields_by_camelcase_name.get(key)
        if field is None:
            raise ManifestError(f"{where}: unknown field {key!r}")
        path = f"{where}.{key}" if where else key
        if field.message_type is not None and field.message_type.full_name == "agentrunner.v1.I18nText":
            out[key] = _i18n(value)
        elif field.enum_type is not None:
            if field.is_repeated:
                out[key] = [_enum_name(field.enum_type, v, path) for v in value or []]
            else:
                out[key] = _enum_name(field.enum_type, value, path)
        elif (
            field.message_type is not None
            and not field.is_repeated
            and isinstance(value, Mapping)
            and not field.message_type.full_name.startswith("google.protobuf.")
        ):
            out[key] = _normalize_message(field.message_type, value, path)
        elif (
            field.message_type is not None
            and field.is_repeated
            and not field.message_type.GetOptions().map_entry
        ):
            out[key] = [
                _normalize_message(field.message_type, v, f"{path}[{i}]") if isinstance(v, Mapping) else v
                for i, v in enumerate(value or [])
            ]
        else:
            out[key] = value
    return out


def _config_field(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    item = dict(data)
    if "default" in item:
        item["default_value"] = item.pop("default")
    return _normalize_message(manifest_pb2.ConfigField.DESCRIPTOR, item, where)


def build_manifest(data: Mapping[str, Any] | RunnerManifest) -> RunnerManifest:
    """A checked `RunnerManifest` from the shorthand dict (or a copy of a proto).

    Fills `name` (last id segment) and `protocol_version`; `capabilities.event_context` is always on.
    """
    if isinstance(data, RunnerManifest):
        manifest = RunnerManifest()
        manifest.CopyFrom(data)
    else:
        raw = copy.deepcopy(dict(data))
        caps = raw.get("capabilities")
        if isinstance(caps, list | tuple | set | frozenset):
            raw["capabilities"] = {str(c).replace("-", "_"): True for c in caps}
        config = raw.pop("config", None)
        if config is not None:
            if "config_schema" in raw:
                raise ManifestError("give either 'config' or 'config_schema', not both")
            raw["config_schema"] = config
        schema = raw.pop("config_schema", None) or []
        normalized = _normalize_message(RunnerManifest.DESCRIPTOR, raw, "")
        normalized["config_schema"] = [_config_field(f, f"config[{i}]") for i, f in enumerate(schema)]
        manifest = RunnerManifest()
        try:
            json_format.ParseDict(normalized, manifest, ignore_unknown_fields=False)
        except json_format.ParseError as exc:
            raise ManifestError(str(exc)) from None
    if not RUNNER_ID_PATTERN.match(manifest.id):
        raise ManifestError(f"runner id {manifest.id!r} must look like 'plugin:<author>/<name>/<runner>'")
    last = manifest.id.rsplit("/", 1)[-1]
    if not manifest.name:
        manifest.name = last
    if not manifest.protocol_version:
        manifest.protocol_version = PROTOCOL_VERSION
    manifest.capabilities.event_context = True
    names = [f.name for f in manifest.config_schema]
    for field in manifest.config_schema:
        if not field.name:
            raise ManifestError("every config field needs a name")
        if field.type == manifest_pb2.CONFIG_FIELD_TYPE_UNSPECIFIED:
            raise ManifestError(f"config field {field.name!r} needs a type")
        if names.count(field.name) > 1:
            raise ManifestError(f"config field {field.name!r} is declared twice")
    return manifest


def load_manifest_file(path: str | Path) -> RunnerManifest:
    """Reads a YAML manifest (the shorthand above; `metadata`/`spec` component layout also accepted)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc}") from None
    if not isinstance(data, Mapping):
        raise ManifestError(f"manifest {path} must be a mapping")
    if "spec" in data or "kind" in data:
        # LangBot component layout: metadata{name,label,description} + spec{...}.
        meta = dict(data.get("metadata") or {})
        flat: dict[str, Any] = dict(data.get("spec") or {})
        for key in ("id", "label", "description"):
            if key in meta:
                flat.setdefault(key, meta[key])
        data = flat
    try:
        return build_manifest(data)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def _check_enum(values: Iterable[int], enum: _EnumTypeWrapper[Any], field: str) -> None:
    known = set(enum.values())
    for value in values:
        if value == 0 or value not in known:
            raise ManifestError(f"permissions.{field}: invalid value {value}")


def _default_matches(field: manifest_pb2.ConfigField) -> bool:
    if not field.HasField("default_value"):
        return True
    kind = field.default_value.WhichOneof("kind")
    t = field.type
    if kind == "null_value":
        return True
    if t in (
        manifest_pb2.CONFIG_FIELD_TYPE_STRING,
        manifest_pb2.CONFIG_FIELD_TYPE_TEXT,
        manifest_pb2.CONFIG_FIELD_TYPE_SECRET,
        manifest_pb2.CONFIG_FIELD_TYPE_SELECT,
        manifest_pb2.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        manifest_pb2.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    ):
        return kind == "string_value"
    if t in (manifest_pb2.CONFIG_FIELD_TYPE_INTEGER, manifest_pb2.CONFIG_FIELD_TYPE_NUMBER):
        return kind == "number_value"
    if t == manifest_pb2.CONFIG_FIELD_TYPE_BOOLEAN:
        return kind == "bool_value"
    if t in (
        manifest_pb2.CONFIG_FIELD_TYPE_STRING_LIST,
        manifest_pb2.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR,
        manifest_pb2.CONFIG_FIELD_TYPE_PROMPT_EDITOR,
    ):
        return kind == "list_value"
    return True


def validate_manifest(manifest: manifest_pb2.RunnerManifest) -> None:
    """Raises `ManifestError` unless a manifest received over the wire is one a v1 host can serve.

    The host runs it on every manifest its registry discovers; the conformance kit runs it on the
    manifests a runner under test lists. `build_manifest` checks the SDK's own manifests when loaded.
    """
    if not RUNNER_ID_PATTERN.match(manifest.id):
        raise ManifestError(f"id: {manifest.id!r} is not plugin:<author>/<name>/<runner>")
    if manifest.name and manifest.name != manifest.id.rsplit("/", 1)[-1]:
        raise ManifestError(f"name: {manifest.name!r} is not the last segment of the id")
    major = manifest.protocol_version.split(".", 1)[0]
    if major != PROTOCOL_VERSION:
        raise ManifestError(
            f"protocol_version: {manifest.protocol_version!r} is not compatible with {PROTOCOL_VERSION!r}"
        )
    perms = manifest.permissions
    _check_enum(perms.models, manifest_pb2.ModelOperation, "models")
    _check_enum(perms.tools, manifest_pb2.ToolOperation, "tools")
    _check_enum(perms.knowledge_bases, manifest_pb2.KnowledgeOperation, "knowledge_bases")
    _check_enum(perms.history, manifest_pb2.HistoryOperation, "history")
    _check_enum(perms.events, manifest_pb2.EventOperation, "events")
    _check_enum(perms.artifacts, manifest_pb2.ArtifactOperation, "artifacts")
    _check_enum(perms.storage, manifest_pb2.StorageArea, "storage")
    _check_enum(perms.files, manifest_pb2.FileKind, "files")
    _check_enum(perms.runs, manifest_pb2.RunRecordOperation, "runs")
    _check_enum(perms.state, common_pb2.StateScope, "state")
    names: set[str] = set()
    for i, field in enumerate(manifest.config_schema):
        where = f"config_schema[{i}]"
        if not field.name:
            raise ManifestError(f"{where}.name: empty")
        if field.name in names:
            raise ManifestError(f"{where}.name: duplicate {field.name!r}")
        names.add(field.name)
        if field.type == 0 or field.type not in manifest_pb2.ConfigFieldType.values():
            raise ManifestError(f"{where}.type: invalid value {field.type}")
        if field.type == manifest_pb2.CONFIG_FIELD_TYPE_SELECT and not field.options:
            raise ManifestError(f"{where}.options: a select field needs options")
        if field.pattern:
            if field.type not in _STRING_FIELDS:
                raise ManifestError(f"{where}.pattern: only string-valued fields take a pattern")
            try:
                re.compile(field.pattern)
            except re.error as exc:
                raise ManifestError(f"{where}.pattern: not a regular expression: {exc}") from None
        if not _default_matches(field):
            raise ManifestError(f"{where}.default_value: does not match the field type")
