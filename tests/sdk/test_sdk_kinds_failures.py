"""The shared contract pieces of harness and service runners: message kinds (answer / reasoning /
progress), the failure-kind vocabulary (`details.kind`) and JSON-typed config values."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field

from agentrunner import Runner, results
from agentrunner.config import ConfigInvalid, JsonConfig, validate_config
from agentrunner.errors import RateLimitedError
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.manifest import build_manifest
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2


class Thinker(Runner):
    manifest = {"id": "plugin:test/thinker/default", "label": "x", "capabilities": ["streaming"]}

    async def run(self, ctx):
        yield results.delta("weigh ", message_id="r1", kind="reasoning")
        yield results.delta("options", message_id="r1", kind="reasoning")
        yield results.message("Reading the config first.", kind="progress", message_id="p1")
        yield results.delta("Use ", message_id="a1")
        yield results.delta("B.", message_id="a1")
        yield results.completed("Use B.", message_id="a1")


@pytest.mark.asyncio
async def test_kinds_travel_on_deltas_and_messages_and_answer_text_ignores_the_rest(host: HostDouble) -> None:
    out = await host.run(Thinker)
    deltas = out.of_type("message.delta")
    assert [d.message_delta.kind for d in deltas] == [
        common_pb2.MESSAGE_KIND_REASONING,
        common_pb2.MESSAGE_KIND_REASONING,
        common_pb2.MESSAGE_KIND_UNSPECIFIED,  # answer is the default and stays unset on the wire
        common_pb2.MESSAGE_KIND_UNSPECIFIED,
    ]
    progress = out.of_type("message.completed")[0].message_completed.message
    assert progress.kind == common_pb2.MESSAGE_KIND_PROGRESS
    assert out.text == "Use B."
    assert out.reasoning == "weigh options"
    assert out.progress == ["Reading the config first."]


@pytest.mark.asyncio
async def test_answer_text_without_a_final_message_is_the_answer_deltas_only() -> None:
    class Streamer(Runner):
        manifest = {"id": "plugin:test/streamer/default", "label": "x", "capabilities": ["streaming"]}

        async def run(self, ctx):
            yield results.delta("thinking…", message_id="r", kind=results.REASONING)
            yield results.delta("4", message_id="a")
            yield results.delta("2", message_id="a")
            yield results.completed()

    async with HostDouble() as host:
        out = await host.run(Streamer)
    assert out.text == "42" and out.reasoning == "thinking…"


def test_message_kind_names_are_checked() -> None:
    assert results.message_kind("progress") == common_pb2.MESSAGE_KIND_PROGRESS
    assert results.kind_name(common_pb2.MESSAGE_KIND_UNSPECIFIED) == "answer"
    with pytest.raises(ValueError, match="unknown message kind"):
        results.delta("x", kind="thought")
    msg = common_pb2.AssistantMessage(content="x", kind=common_pb2.MESSAGE_KIND_REASONING)
    assert not results.is_answer(msg) and results.is_answer(common_pb2.AssistantMessage(content="y"))


def test_failed_puts_the_kind_in_details_and_refuses_unknown_kinds() -> None:
    r = results.failed(
        "dify.http_error", "503", retryable=True, kind=FailureKind.HTTP_ERROR, details={"status": 503}
    )
    assert json_format.MessageToDict(r.run_failed.details) == {"status": 503.0, "kind": "http_error"}
    with pytest.raises(ValueError, match="unknown failure kind 'oops'"):
        results.failed("x.y", "z", kind="oops")


class Failing(Runner):
    manifest = {"id": "plugin:test/failing/default", "label": "x"}

    async def run(self, ctx):
        mode = ctx.input.text
        if mode == "failure":
            raise RunnerFailure(
                "svc.rate_limited",
                "slow down",
                kind="rate_limited",
                details={"retry_after": 3},
                usage=results.usage(5, 0),
            )
        if mode == "host":
            raise RateLimitedError("the host is busy")
        if mode == "bug":
            raise KeyError("boom")
        yield results.completed("ok")


@pytest.mark.asyncio
async def test_runner_failure_becomes_exactly_its_run_failed(host: HostDouble) -> None:
    out = await host.run(Failing, "failure")
    failure = out.failure
    assert failure is not None and failure.code == "svc.rate_limited" and failure.retryable  # kind's default
    assert json_format.MessageToDict(failure.details) == {"retry_after": 3.0, "kind": "rate_limited"}
    assert out.terminal.usage.prompt_tokens == 5 and out.terminal.usage.completion_tokens == 0


@pytest.mark.parametrize(
    ("mode", "code", "kind"),
    [("host", "rate_limited", "rate_limited"), ("bug", "runner.exception", "internal_error")],
)
@pytest.mark.asyncio
async def test_sdk_failures_carry_a_kind(host: HostDouble, mode: str, code: str, kind: str) -> None:
    out = await host.run(Failing, mode)
    assert out.failure is not None and out.failure.code == code
    assert json_format.MessageToDict(out.failure.details)["kind"] == kind


JSON_MANIFEST = build_manifest(
    {
        "id": "plugin:test/json/default",
        "config": [
            {"name": "args-json", "type": "json", "default": []},
            {"name": "env-json", "type": "json", "default": {}},
        ],
    }
)


@pytest.mark.parametrize(
    ("given", "args", "env"),
    [
        ({"args-json": '["--fast"]', "env-json": '{"A": "1"}'}, ["--fast"], {"A": "1"}),  # legacy JSON text
        ({"args-json": ["--fast"], "env-json": {"A": "1"}}, ["--fast"], {"A": "1"}),  # native values
        ({"args-json": "", "env-json": "  "}, [], {}),  # blank legacy text = absent: the default applies
    ],
)
def test_json_config_values_take_a_json_text_or_a_native_value(
    given: dict[str, Any], args: list[Any], env: dict[str, Any]
) -> None:
    config = validate_config(JSON_MANIFEST.config_schema, given)
    assert config["args-json"] == args and config["env-json"] == env


def test_a_json_config_text_that_is_not_json_names_the_field() -> None:
    with pytest.raises(ConfigInvalid) as err:
        validate_config(JSON_MANIFEST.config_schema, {"env-json": "{A: 1}"})
    assert err.value.field == "env-json" and "expected JSON" in str(err.value)


def test_json_config_in_a_config_model() -> None:
    class Model(BaseModel):
        model_config = ConfigDict(populate_by_name=True)
        env: JsonConfig[dict[str, str]] = Field(default_factory=dict, alias="env-json")

    assert Model.model_validate({"env-json": '{"K": "v"}'}).env == {"K": "v"}
    assert Model.model_validate({"env-json": {"K": "w"}}).env == {"K": "w"}
    assert Model.model_validate({"env-json": ""}).env == {}
    with pytest.raises(ValueError, match="expected JSON"):
        Model.model_validate({"env-json": "[1"})
