"""Runner manifests: written as a short dict or YAML file, checked strictly, turned into the contract's
`RunnerManifest`.

The shorthand is only a spelling of the proto (no parallel schema): enum values are written in lower
case without their prefix (`history: [page]`, `state: [conversation]`, `type: integer`), capabilities as a
list of names, labels as a string (`en_US`) or a dict of translations. Everything else goes through
`google.protobuf.json_format.ParseDict`, which rejects unknown fields.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import descriptor, json_format

from agentrunner.protocol import PROTOCOL_VERSION, RUNNER_ID_PATTERN
from agentrunner.v1 import manifest_pb2

RunnerManifest = manifest_pb2.RunnerManifest

_DEFAULT_LOCALE = "en_US"


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
