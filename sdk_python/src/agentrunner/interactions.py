"""Structured interactions (human in the loop): build and check an `InteractionRequest` locally.

The host enforces the same limits; checking here turns a rejected request into an error at the line
that built it instead of a dropped result. Limits live in `agentrunner.protocol`: 50 fields, 20
actions, 100 options per field, 256 KiB serialized, expiry at most 24 hours ahead (default 30 minutes,
filled in by the host when unset).

    req = interactions.build(
        "Deploy?", kind="confirmation", actions=[interactions.action("yes", "Deploy", "primary"),
                                                 interactions.action("no", "Cancel")],
    )
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agentrunner.errors import InvalidArgumentError, PayloadTooLargeError
from agentrunner.protocol import (
    INTERACTION_MAX_ACTIONS,
    INTERACTION_MAX_BYTES,
    INTERACTION_MAX_FIELDS,
    INTERACTION_MAX_OPTIONS,
    INTERACTION_MAX_TTL_SECONDS,
)
from agentrunner.results import to_struct, to_value
from agentrunner.v1 import common_pb2

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

C = common_pb2

__all__ = ["action", "build", "fallback_text", "field", "option", "validate"]

FieldSpec = C.InteractionField | Mapping[str, Any]
ActionSpec = C.InteractionAction | Mapping[str, Any] | tuple[str, str] | tuple[str, str, str] | str
OptionSpec = C.InteractionOption | Mapping[str, Any] | tuple[str, str] | str

_FALLBACK_MAX = 20000
EnumT = TypeVar("EnumT", bound=int)
_CHOICE_TYPES = (C.INTERACTION_FIELD_TYPE_SELECT, C.INTERACTION_FIELD_TYPE_MULTISELECT)


def _enum(enum: _EnumTypeWrapper[EnumT], prefix: str, value: str | int, what: str) -> EnumT:
    if isinstance(value, int):
        return cast(EnumT, value)  # an enum number as given (protobuf enums are open)
    name = prefix + value.upper()
    if name not in enum.keys() or name.endswith("_UNSPECIFIED"):
        allowed = ", ".join(
            k.removeprefix(prefix).lower() for k in enum.keys() if not k.endswith("UNSPECIFIED")
        )
        raise InvalidArgumentError(f"unknown {what} {value!r} (one of {allowed})", field=what)
    return enum.Value(name)


def option(value: str, label: str | None = None, description: str = "") -> C.InteractionOption:
    """A choice of a select field; the label defaults to the value."""
    return C.InteractionOption(
        value=value, label=label if label is not None else value, description=description
    )


def _option(spec: OptionSpec) -> C.InteractionOption:
    if isinstance(spec, C.InteractionOption):
        return spec
    if isinstance(spec, str):
        return option(spec)
    if isinstance(spec, tuple):
        return option(*spec)
    return option(str(spec["value"]), spec.get("label"), spec.get("description", ""))


def field(
    id: str,
    label: str,
    type: str | int = "text",
    *,
    required: bool = False,
    options: Iterable[OptionSpec] = (),
    placeholder: str = "",
    default: Any = None,
) -> C.InteractionField:
    """A field: `type` is text, textarea, select, multiselect, number, boolean or file."""
    out = C.InteractionField(
        id=id,
        label=label,
        type=_enum(C.InteractionFieldType, "INTERACTION_FIELD_TYPE_", type, "field type"),
        required=required,
        options=[_option(o) for o in options],
        placeholder=placeholder,
    )
    if default is not None:
        out.default_value.CopyFrom(to_value(default))
    return out


def _field(spec: FieldSpec) -> C.InteractionField:
    if isinstance(spec, C.InteractionField):
        return spec
    d = dict(spec)
    return field(
        str(d.pop("id", "")),
        str(d.pop("label", "")),
        d.pop("type", "text"),
        required=bool(d.pop("required", False)),
        options=d.pop("options", ()),
        placeholder=str(d.pop("placeholder", "") or ""),
        default=d.pop("default", None),
    )


def action(id: str, label: str | None = None, style: str | int = "default") -> C.InteractionAction:
    """A submit action: `style` is default, primary or danger."""
    return C.InteractionAction(
        id=id,
        label=label if label is not None else id,
        style=_enum(C.InteractionActionStyle, "INTERACTION_ACTION_STYLE_", style, "action style"),
    )


def _action(spec: ActionSpec) -> C.InteractionAction:
    if isinstance(spec, C.InteractionAction):
        return spec
    if isinstance(spec, str):
        return action(spec)
    if isinstance(spec, tuple):
        return action(*spec)
    return action(str(spec.get("id", "")), spec.get("label"), spec.get("style", "default"))


def fallback_text(request: C.InteractionRequest) -> str:
    """A plain-text rendering for surfaces that cannot show the interaction."""
    lines = [request.title]
    if request.description:
        lines.append(request.description)
    for f in request.fields:
        choices = f" ({', '.join(o.label for o in f.options)})" if f.options else ""
        lines.append(f"- {f.label}{' *' if f.required else ''}{choices}")
    if request.actions:
        lines.append("Options: " + ", ".join(a.label for a in request.actions))
    text = "\n".join(lines)
    return text if len(text) <= _FALLBACK_MAX else text[: _FALLBACK_MAX - 1] + "…"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def build(
    title: str,
    *,
    kind: str | int = "form",
    fields: Iterable[FieldSpec] = (),
    actions: Iterable[ActionSpec] = (),
    description: str = "",
    fallback: str | None = None,
    interaction_id: str | None = None,
    expires_in: float | dt.timedelta | None = None,
    expires_at: dt.datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
    capabilities: C.InteractionCapabilities | None = None,
    now: dt.datetime | None = None,
) -> C.InteractionRequest:
    """Builds and validates a request; raises `InvalidArgumentError` / `PayloadTooLargeError`.

    `fallback` defaults to a plain-text rendering of the request; `expires_in` (seconds or timedelta)
    or `expires_at` set the expiry, else the host applies its 30-minute default.
    """
    request = C.InteractionRequest(
        interaction_id=interaction_id or f"ia_{uuid.uuid4().hex}",
        kind=_enum(C.InteractionKind, "INTERACTION_KIND_", kind, "kind"),
        title=title,
        description=description,
        fields=[_field(f) for f in fields],
        actions=[_action(a) for a in actions],
    )
    if metadata:
        request.metadata.CopyFrom(to_struct(metadata))
    now = now or _now()
    if expires_in is not None:
        delta = expires_in if isinstance(expires_in, dt.timedelta) else dt.timedelta(seconds=expires_in)
        expires_at = now + delta
    if expires_at is not None:
        request.expires_at.FromDatetime(expires_at.astimezone(dt.UTC))
    request.fallback_text = fallback if fallback is not None else fallback_text(request)
    return validate(request, capabilities=capabilities, now=now)


def _length(value: str, name: str, low: int, high: int) -> None:
    if not low <= len(value) <= high:
        bound = f"1..{high}" if low else f"at most {high}"
        raise InvalidArgumentError(f"{name} must have {bound} characters (has {len(value)})", field=name)


def _unique(ids: list[str], what: str) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InvalidArgumentError(f"duplicate {what} id {i!r}", field=f"{what}s")
        seen.add(i)


def _check_counts(request: C.InteractionRequest, capabilities: C.InteractionCapabilities | None) -> None:
    """The protocol's caps on fields and actions, and the surface's `max_fields` when it declares one."""
    if len(request.fields) > INTERACTION_MAX_FIELDS:
        raise InvalidArgumentError(
            f"an interaction has at most {INTERACTION_MAX_FIELDS} fields (got {len(request.fields)})",
            field="fields",
        )
    if len(request.actions) > INTERACTION_MAX_ACTIONS:
        raise InvalidArgumentError(
            f"an interaction has at most {INTERACTION_MAX_ACTIONS} actions (got {len(request.actions)})",
            field="actions",
        )
    if capabilities is not None and capabilities.HasField("max_fields"):
        if len(request.fields) > capabilities.max_fields:
            raise InvalidArgumentError(
                f"this surface renders at most {capabilities.max_fields} fields (got {len(request.fields)})",
                field="fields",
            )


def _check_field(f: C.InteractionField, where: str) -> None:
    """One field: its lengths, a type, its options (capped, unique, and present on a select field)."""
    _length(f.id, f"{where}.id", 1, 128)
    _length(f.label, f"{where}.label", 1, 512)
    _length(f.placeholder, f"{where}.placeholder", 0, 1000)
    if f.type == C.INTERACTION_FIELD_TYPE_UNSPECIFIED:
        raise InvalidArgumentError(f"{where} ({f.id!r}) has no type", field=f"{where}.type")
    if len(f.options) > INTERACTION_MAX_OPTIONS:
        raise InvalidArgumentError(
            f"{where} ({f.id!r}) has {len(f.options)} options; at most {INTERACTION_MAX_OPTIONS}",
            field=f"{where}.options",
        )
    if f.type in _CHOICE_TYPES and not f.options:
        raise InvalidArgumentError(f"{where} ({f.id!r}) is a select field without options", field=where)
    for j, o in enumerate(f.options):
        _length(o.value, f"{where}.options[{j}].value", 1, 512)
        _length(o.label, f"{where}.options[{j}].label", 1, 512)
    _unique([o.value for o in f.options], f"{where}.option")


def _check_kind(request: C.InteractionRequest) -> None:
    """A confirmation offers an action; a choice offers actions or a select field."""
    if request.kind == C.INTERACTION_KIND_CONFIRMATION and not request.actions:
        raise InvalidArgumentError("a confirmation needs at least one action", field="actions")
    if (
        request.kind == C.INTERACTION_KIND_CHOICE
        and not request.actions
        and not any(f.type in _CHOICE_TYPES for f in request.fields)
    ):
        raise InvalidArgumentError("a choice needs actions or a select field", field="actions")


def _check_expiry(request: C.InteractionRequest, now: dt.datetime | None) -> None:
    """`expires_at`, when set, lies ahead and at most `INTERACTION_MAX_TTL_SECONDS` away."""
    if not request.HasField("expires_at"):
        return
    now = now or _now()
    expires = request.expires_at.ToDatetime(tzinfo=dt.UTC)
    if expires <= now:
        raise InvalidArgumentError("expires_at is in the past", field="expires_at")
    if expires - now > dt.timedelta(seconds=INTERACTION_MAX_TTL_SECONDS):
        raise InvalidArgumentError(
            f"expires_at is more than {INTERACTION_MAX_TTL_SECONDS // 3600} hours ahead",
            field="expires_at",
        )


def validate(
    request: C.InteractionRequest,
    *,
    capabilities: C.InteractionCapabilities | None = None,
    now: dt.datetime | None = None,
) -> C.InteractionRequest:
    """Checks a request against the protocol limits (and the surface's `max_fields`); returns it.

    Raises `InvalidArgumentError` naming the offending field (`metadata.field`), or
    `PayloadTooLargeError` when the serialized request is over `INTERACTION_MAX_BYTES`."""
    _length(request.interaction_id, "interaction_id", 1, 255)
    _length(request.title, "title", 1, 1000)
    _length(request.description, "description", 0, 10000)
    _length(request.fallback_text, "fallback_text", 1, 20000)
    _check_counts(request, capabilities)
    for i, f in enumerate(request.fields):
        _check_field(f, f"fields[{i}]")
    _unique([f.id for f in request.fields], "field")
    for i, a in enumerate(request.actions):
        _length(a.id, f"actions[{i}].id", 1, 128)
        _length(a.label, f"actions[{i}].label", 1, 512)
    _unique([a.id for a in request.actions], "action")
    _check_kind(request)
    _check_expiry(request, now)
    size = request.ByteSize()
    if size > INTERACTION_MAX_BYTES:
        raise PayloadTooLargeError(
            f"the interaction is {size} bytes serialized; at most {INTERACTION_MAX_BYTES}",
            metadata={"field": "interaction", "size": size, "cap": INTERACTION_MAX_BYTES},
        )
    return request
