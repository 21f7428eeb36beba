"""Structured interactions: builders, local limit checks, `interaction.requested` results and answers."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrunner import RunContext, interactions, results
from agentrunner.errors import InvalidArgumentError, PayloadTooLargeError
from agentrunner.results import RunResult
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, context_pb2
from tests.sdk.parity_support import box, use

C = common_pb2
NOW = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)


def fields(n: int) -> list[dict[str, Any]]:
    return [{"id": f"f{i}", "label": f"Field {i}"} for i in range(n)]


# -- local limits (no host needed) --------------------------------------------------------------


def test_limits_are_inclusive_at_50_fields_and_20_actions() -> None:
    req = interactions.build("t", fields=fields(50), actions=[f"a{i}" for i in range(20)], now=NOW)
    assert len(req.fields) == 50 and len(req.actions) == 20


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"fields": fields(51)}, "fields", "at most 50 fields"),
        ({"actions": [f"a{i}" for i in range(21)]}, "actions", "at most 20 actions"),
        ({"expires_in": dt.timedelta(hours=24, seconds=1)}, "expires_at", "24 hours"),
        ({"expires_in": -5}, "expires_at", "in the past"),
        ({"fields": [{"id": "x", "label": "X"}, {"id": "x", "label": "Y"}]}, "fields", "duplicate field id"),
        ({"actions": ["go", "go"]}, "actions", "duplicate action id"),
        ({"fields": [{"id": "c", "label": "C", "type": "select"}]}, "fields[0]", "without options"),
        (
            {
                "fields": [
                    {"id": "c", "label": "C", "type": "select", "options": [str(i) for i in range(101)]}
                ]
            },
            "fields[0].options",
            "at most 100",
        ),
        ({"fields": [{"id": "", "label": "C"}]}, "fields[0].id", "1..128"),
        ({"fields": [{"id": "c", "label": "C", "type": "color"}]}, "field type", "unknown field type"),
        ({"kind": "confirmation"}, "actions", "at least one action"),
        ({"interaction_id": "x" * 256}, "interaction_id", "1..255"),
    ],
)
def test_each_limit_has_a_clear_error(kwargs: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        interactions.build("Title", now=NOW, **kwargs)
    assert info.value.field == field


def test_empty_title_and_fallback_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="title"):
        interactions.build("", now=NOW)
    with pytest.raises(InvalidArgumentError, match="fallback_text"):
        interactions.build("t", fallback="", now=NOW)


def test_256_kib_serialized_is_the_cap() -> None:
    long_options = [{"value": f"v{i}", "label": "L" * 500} for i in range(100)]
    big = [{"id": f"f{i}", "label": "F", "type": "select", "options": long_options} for i in range(6)]
    with pytest.raises(PayloadTooLargeError, match="at most 262144") as info:
        interactions.build("t", fields=big, now=NOW)
    assert info.value.reason == "PAYLOAD_TOO_LARGE"
    assert interactions.build("t", fields=big[:4], now=NOW).ByteSize() <= 256 * 1024


def test_surface_max_fields_is_respected() -> None:
    caps = C.InteractionCapabilities(max_fields=3)
    with pytest.raises(InvalidArgumentError, match="surface renders at most 3 fields"):
        interactions.build("t", fields=fields(4), capabilities=caps, now=NOW)


def test_fallback_text_is_generated_from_the_request() -> None:
    req = interactions.build(
        "Pick a size",
        description="for your order",
        fields=[{"id": "size", "label": "Size", "type": "select", "required": True, "options": ["S", "M"]}],
        actions=[("ok", "OK", "primary")],
        now=NOW,
    )
    assert req.fallback_text == "Pick a size\nfor your order\n- Size * (S, M)\nOptions: OK"
    assert not req.HasField("expires_at"), "the host applies its default expiry"


# -- in a run -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_helpers_emit_interaction_requested_results(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        form = await ctx.request_form(
            "Refund?",
            [{"id": "reason", "label": "Reason", "type": "textarea", "required": True}],
            expires_in=600,
            interaction_id="ia_form",
        )
        box["form_id"] = form.interaction_id
        await ctx.request_confirmation("Delete the file?", danger=True, interaction_id="ia_confirm")
        await ctx.request_choice(
            "Which plan?", [("free", "Free"), ("pro", "Pro")], interaction_id="ia_choice"
        )
        yield results.completed("asked")

    out = await host.run(use(script), "hi")
    assert out.types == ["interaction.requested"] * 3 + ["run.completed"]
    form, confirm, choice = (r.interaction_requested.interaction for r in out.results[:3])
    assert box["form_id"] == form.interaction_id == "ia_form"
    assert form.kind == C.INTERACTION_KIND_FORM
    assert [(a.id, a.style) for a in form.actions] == [("submit", C.INTERACTION_ACTION_STYLE_PRIMARY)]
    remaining = form.expires_at.ToDatetime(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=9) < remaining <= dt.timedelta(minutes=10)
    assert confirm.kind == C.INTERACTION_KIND_CONFIRMATION
    assert [(a.id, a.style) for a in confirm.actions] == [
        ("confirm", C.INTERACTION_ACTION_STYLE_DANGER),
        ("cancel", C.INTERACTION_ACTION_STYLE_DEFAULT),
    ]
    assert choice.kind == C.INTERACTION_KIND_CHOICE and [a.label for a in choice.actions] == ["Free", "Pro"]
    assert all(i.fallback_text for i in (form, confirm, choice))


@pytest.mark.asyncio
async def test_an_invalid_request_emits_nothing(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        try:
            await ctx.request_form("Too big", fields(51))
        except InvalidArgumentError as exc:
            box["error"] = str(exc)
        yield results.completed("gave up")

    out = await host.run(use(script), "hi")
    assert out.types == ["run.completed"]
    assert "at most 50 fields" in box["error"]


@pytest.mark.asyncio
async def test_the_surface_limit_from_the_context_applies_in_a_run(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        with pytest.raises(InvalidArgumentError, match="at most 2 fields"):
            await ctx.request_form("t", fields(3))
        yield results.completed("ok")

    out = await host.run(use(script), "hi", interactions=C.InteractionCapabilities(max_fields=2))
    assert out.types == ["run.completed"]


@pytest.mark.asyncio
async def test_an_answer_arrives_as_input_interaction_and_typed_event(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        box["interaction"] = ctx.input.interaction
        box["values"] = ctx.input.interaction_values
        box["event"] = ctx.platform_event
        yield results.completed("thanks")

    answer = {"interaction_id": "ia_form", "action_id": "submit", "values": {"reason": "broken"}}
    out = await host.run(use(script), "", interaction=answer)
    assert out.completed
    ctx: RunContext = box["ctx"]
    assert ctx.event.event_type == "interaction.submitted"
    assert box["interaction"].interaction_id == "ia_form" and box["interaction"].action_id == "submit"
    assert box["values"] == {"reason": "broken"}
    assert isinstance(box["event"], context_pb2.InteractionSubmittedEvent)
    assert box["event"].submission.interaction_id == "ia_form"


@pytest.mark.asyncio
async def test_no_interaction_outside_an_answer(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        box["interaction"] = ctx.input.interaction
        box["values"] = ctx.input.interaction_values
        yield results.completed("x")

    await host.run(use(script), "hello")
    assert box["interaction"] is None and box["values"] == {}
