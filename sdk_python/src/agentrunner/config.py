"""Validation of `RunContext.config` against the manifest's `config_schema`, before `run` starts.

JSON numbers arrive as doubles through `google.protobuf.Struct`; integer fields are turned back into
`int` here so runners see the types they declared.

JSON-typed fields (`type: json`, e.g. `args-json`, `env-json`, `mcp-servers-json`, `tweaks`) take either
a JSON string (LangBot's legacy form, copied by `migrate-pipeline`) or the native value; runners always
see the parsed value. A blank string counts as absent (the default applies); a string that is not JSON
is `runner.config_invalid` naming the field. `JsonConfig[T]` does the same for a `config_model` field.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from google.protobuf import json_format, struct_pb2

from agentrunner.v1 import manifest_pb2

T = manifest_pb2.ConfigFieldType

_STRINGS = frozenset(
    {
        T.CONFIG_FIELD_TYPE_STRING,
        T.CONFIG_FIELD_TYPE_TEXT,
        T.CONFIG_FIELD_TYPE_SECRET,
        T.CONFIG_FIELD_TYPE_SELECT,
        T.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        T.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    }
)
_STRING_LISTS = frozenset(
    {T.CONFIG_FIELD_TYPE_STRING_LIST, T.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR}
)


def parse_json_value(value: Any, field: str = "config") -> Any:
    """A JSON config value: a string is parsed as JSON (raises `ConfigInvalid`), anything else kept."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigInvalid(
            field, f"expected JSON (a JSON text or a native value): {exc.msg} at position {exc.pos}"
        ) from None


def _json_before(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            from pydantic_core import PydanticUseDefault

            raise PydanticUseDefault()
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected JSON (a JSON text or a native value): {exc.msg}") from None
    return value


_T = TypeVar("_T")


def __getattr__(name: str) -> Any:
    # `JsonConfig` needs pydantic, which plain runners never import: built on first use.
    if name == "JsonConfig":
        from pydantic import BeforeValidator

        alias = Annotated[_T, BeforeValidator(_json_before)]
        globals()["JsonConfig"] = alias
        return alias
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    #: A `config_model` field taking a JSON string or the native value: `env: JsonConfig[dict[str, str]]`.
    JsonConfig = Annotated[_T, ...]


class ConfigInvalid(ValueError):
    """A config value does not match the schema; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"config field {field!r}: {message}")
        self.field = field


def _type_name(kind: manifest_pb2.ConfigFieldType.ValueType) -> str:
    return T.Name(kind).removeprefix("CONFIG_FIELD_TYPE_").lower().replace("_", "-")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _pattern(field: manifest_pb2.ConfigField) -> re.Pattern[str]:
    """The field's `pattern`, compiled (a manifest with an invalid one is refused when it is loaded)."""
    try:
        return _compiled(field.pattern)
    except re.error as exc:
        raise ConfigInvalid(
            field.name, f"the manifest's pattern {field.pattern!r} is invalid: {exc}"
        ) from None


def _string(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if not isinstance(value, str):
        raise ConfigInvalid(field.name, f"expected a string, got {type(value).__name__}")
    if field.type == T.CONFIG_FIELD_TYPE_SELECT and field.options:
        allowed = [o.name for o in field.options]
        if value not in allowed:
            raise ConfigInvalid(field.name, f"{value!r} is not one of {allowed}")
    if field.pattern and not _pattern(field).search(value):
        shown = "the value" if field.type == T.CONFIG_FIELD_TYPE_SECRET else repr(value)
        raise ConfigInvalid(field.name, f"{shown} does not match the pattern {field.pattern}")
    return value


def _integer(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigInvalid(field.name, f"expected an integer, got {type(value).__name__}")
    if isinstance(value, float) and not value.is_integer():
        raise ConfigInvalid(field.name, f"expected an integer, got {value}")
    return int(value)


def _number(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigInvalid(field.name, f"expected a number, got {type(value).__name__}")
    return value


def _boolean(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ConfigInvalid(field.name, f"expected a boolean, got {type(value).__name__}")
    return value


def _string_list(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigInvalid(field.name, "expected a list of strings")
    return value


def _prompt(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if not isinstance(value, list) or not all(
        isinstance(v, Mapping) and isinstance(v.get("role"), str) for v in value
    ):
        raise ConfigInvalid(field.name, "expected a list of {role, content} messages")
    return value


def _model_fallback(field: manifest_pb2.ConfigField, value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("primary", ""), str):
        return value
    raise ConfigInvalid(field.name, "expected a model id, a list of ids or {primary, fallbacks}")


def _json(field: manifest_pb2.ConfigField, value: Any) -> Any:
    return parse_json_value(value, field.name)


#: the check of each declared type (a type not here takes any value)
_CHECKS: dict[int, Callable[[manifest_pb2.ConfigField, Any], Any]] = {
    **dict.fromkeys(_STRINGS, _string),
    T.CONFIG_FIELD_TYPE_INTEGER: _integer,
    T.CONFIG_FIELD_TYPE_NUMBER: _number,
    T.CONFIG_FIELD_TYPE_BOOLEAN: _boolean,
    **dict.fromkeys(_STRING_LISTS, _string_list),
    T.CONFIG_FIELD_TYPE_PROMPT_EDITOR: _prompt,
    T.CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR: _model_fallback,
    T.CONFIG_FIELD_TYPE_JSON: _json,
}


def check_value(field: manifest_pb2.ConfigField, value: Any) -> Any:
    """One value against its field's declared type (integers back to `int`); raises `ConfigInvalid`.
    Also what the host's `config check` applies to an agent's `runner_config`."""
    check = _CHECKS.get(field.type)
    return value if check is None else check(field, value)


def validate_config(
    schema: Sequence[manifest_pb2.ConfigField], config: struct_pb2.Struct | Mapping[str, Any] | None
) -> dict[str, Any]:
    """The config with defaults applied and declared types enforced; raises `ConfigInvalid`.

    Keys the schema does not declare are kept as they are (the host may pass newer fields).
    """
    if isinstance(config, struct_pb2.Struct):
        values: dict[str, Any] = json_format.MessageToDict(config)
    else:
        values = dict(config or {})
    for field in schema:
        if field.type == T.CONFIG_FIELD_TYPE_JSON and isinstance(values.get(field.name), str):
            if not values[field.name].strip():
                values[field.name] = None  # a blank legacy JSON text: absent
        present = field.name in values and values[field.name] is not None
        if not present:
            if field.HasField("default_value"):
                default = json_format.MessageToDict(field.default_value)
                if default is not None:
                    values[field.name] = check_value(field, default)
                    continue
            if field.required:
                raise ConfigInvalid(field.name, f"is required ({_type_name(field.type)})")
            values.pop(field.name, None)
            continue
        values[field.name] = check_value(field, values[field.name])
    return values
