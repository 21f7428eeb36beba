"""The bridge's translations, each checked against the public plugin SDK's own models (`langbot-plugin`
0.7.18, the dev group installs it): what the bridge sends a plugin must validate as the SDK's
`RunnerContext`; what a plugin's SDK produces (`RunnerResult`, `RunnerManifest`) must translate into
what this protocol's host accepts."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langbot_plugin.api.entities.builtin.provider.message import LLMTokenUsage, Message, MessageChunk
from langbot_plugin.api.entities.builtin.runner import (
    InteractionAction,
    InteractionField,
    InteractionOption,
    InteractionRequest,
    RunnerContext,
    RunnerResult,
)
from langbot_plugin.api.entities.builtin.runner.manifest import RunnerManifest as LangBotManifest

from agentrunner.context import RunContext
from agentrunner.manifest import ManifestError
from agentrunner.testing import make_context
from agentrunner.v1 import common_pb2, context_pb2, manifest_pb2
from agentrunner_runners.langbot_bridge.context import EVENT_REPLY_TOOL, runner_context
from agentrunner_runners.langbot_bridge.kinds import AGENT_RUNNER, KINDS, RUNNER
from agentrunner_runners.langbot_bridge.manifest import translate
from agentrunner_runners.langbot_bridge.results import ResultTranslator

RUN = "run-1"


def _ctx(**kwargs: Any) -> RunContext:
    raw = make_context("hello there", run_id=RUN, **kwargs)
    return RunContext(raw, config={k: v for k, v in kwargs.get("config", {}).items()})


# -- context -------------------------------------------------------------------------------------
def test_a_full_context_validates_as_the_sdks_runner_context() -> None:
    attachment = common_pb2.ArtifactRef(
        artifact_id="art-1", mime_type="image/png", size_bytes=12, name="a.png"
    )
    event = context_pb2.PlatformEvent(bot_id="bot-9", adapter_name="telegram")
    event.message_received.text = "hello there"
    event.message_received.chat_id = "chat-1"
    event.message_received.sender.id = "u-1"
    event.message_received.sender.nickname = "Ann"
    apis = {"history_page": True, "state": True, "reply": True, "run_get": True, "prompt_get": True}
    raw = make_context(
        "hello there",
        run_id=RUN,
        config={"depth": 3, "style": "short"},
        models=["chat"],
        tools=["add"],
        knowledge_bases=["docs"],
        skills=["writing"],
        state={"conversation": {"counter": 2}},
        attachments=[attachment],
        contents=[common_pb2.ContentElement(text="hello there")],
        platform_event=event,
        variables={"lang": "en"},
        interactions=common_pb2.InteractionCapabilities(
            field_types=[common_pb2.INTERACTION_FIELD_TYPE_TEXT],
            action_styles=[common_pb2.INTERACTION_ACTION_STYLE_PRIMARY],
        ),
        apis=apis,
    )
    raw.runtime.deadline_at.FromSeconds(int(time.time()) + 60)
    raw.runtime.metadata.update({"trace": "x"})
    ctx = RunContext(raw, config={"depth": 3, "style": "short"})
    data = runner_context(ctx, RUNNER)
    parsed = RunnerContext.model_validate(data)
    assert parsed.run_id == RUN and parsed.input.to_text() == "hello there"
    assert parsed.input.attachments[0].ref == "art-1" and parsed.input.attachments[0].type == "image"
    assert parsed.state.conversation == {"counter": 2} and isinstance(
        parsed.state.conversation["counter"], int
    )
    assert parsed.config == {"depth": 3, "style": "short"}
    assert parsed.variables == {"lang": "en"}
    assert parsed.runtime.metadata["component_kind"] == "Runner" and parsed.runtime.deadline_at > time.time()
    assert parsed.context.available_apis.reply_stream and not parsed.context.available_apis.box
    assert parsed.context.available_apis.history_page and parsed.context.available_apis.run_get
    names = [t.tool_name for t in parsed.resources.tools]
    assert names == ["add", EVENT_REPLY_TOOL]  # ctx.reply / ctx.reply_stream check for this grant
    assert [m.model_id for m in parsed.resources.models] == ["chat"]
    assert parsed.delivery.interactions is not None and parsed.delivery.interactions.field_types == ["text"]
    typed = parsed.platform_event  # the EBA event built from the host's typed event
    assert type(typed).__name__ == "MessageReceivedEvent" and typed.sender.nickname == "Ann"


def test_an_interaction_answer_reaches_the_plugin_as_its_submission() -> None:
    raw = make_context(
        "", run_id=RUN, interaction={"interaction_id": "confirm-1", "action_id": "yes", "values": {"n": 2}}
    )
    parsed = RunnerContext.model_validate(runner_context(RunContext(raw, config={}), RUNNER))
    assert parsed.event.event_type == "interaction.submitted"
    assert parsed.input.interaction is not None
    assert (parsed.input.interaction.action_id, parsed.input.interaction.values) == ("yes", {"n": 2})


def test_without_a_reply_grant_no_event_reply_tool_is_offered() -> None:
    parsed = RunnerContext.model_validate(runner_context(_ctx(apis={"reply": False}), AGENT_RUNNER))
    assert [t.tool_name for t in parsed.resources.tools] == []
    assert not parsed.context.available_apis.reply_stream
    assert parsed.runtime.metadata["component_kind"] == "AgentRunner"


def test_the_kinds_table_has_one_row_per_component_kind() -> None:
    assert [(k.name, k.list_action, k.run_action) for k in KINDS] == [
        ("Runner", "list_runners", "run_runner"),
        ("AgentRunner", "list_agent_runners", "run_agent"),
    ]


# -- manifests ----------------------------------------------------------------------------------
def _entry(**spec: Any) -> dict[str, Any]:
    """A discovery entry as the runtime builds it (`list_runners`), from the SDK's own manifest model."""
    manifest = LangBotManifest(
        id="plugin:acme/agent/default",
        name="default",
        label={"en_US": "Acme agent", "zh_Hans": "Acme"},
        usages=["agent"],
        description={"en_US": "does things"},
        capabilities=spec.get("capabilities", {}),
        permissions=spec.get("permissions", {}),
        config_schema=spec.get("config", []),
    ).model_dump(mode="json")
    return {
        "plugin_author": "acme",
        "plugin_name": "agent",
        "plugin_version": "1.2.0",
        "runner_name": "default",
        "manifest": manifest,
        "capabilities": manifest["capabilities"],
        "permissions": manifest["permissions"],
        "config": manifest["config_schema"],
    }


def test_a_manifest_keeps_its_id_capabilities_and_permissions() -> None:
    entry = _entry(
        capabilities={"streaming": True, "interrupt": True, "steering": True, "interactions": True},
        permissions={
            "models": ["invoke", "count_tokens"],
            "history": ["page"],
            "storage": ["plugin", "workspace"],
        },
    )
    manifest = translate(entry, RUNNER)
    assert manifest.id == "plugin:acme/agent/default" and manifest.name == "default"
    assert manifest.label.translations == {"en_US": "Acme agent", "zh_Hans": "Acme"}
    caps = manifest.capabilities
    assert (caps.streaming, caps.interrupt, caps.steering, caps.interactions, caps.event_context) == (
        True,
    ) * 5
    assert not caps.tool_calling
    perms = manifest.permissions
    assert list(perms.models) == [
        manifest_pb2.MODEL_OPERATION_COUNT_TOKENS,
        manifest_pb2.MODEL_OPERATION_INVOKE,
    ]
    assert list(perms.history) == [manifest_pb2.HISTORY_OPERATION_PAGE]
    assert list(perms.storage) == [manifest_pb2.STORAGE_AREA_PLUGIN, manifest_pb2.STORAGE_AREA_WORKSPACE]
    # what the SDK offers every runner without a declaration: the host's policy decides
    assert len(perms.state) == 4 and len(perms.runs) == 6 and perms.prompt
    assert manifest.context_policy.supports_history_pull
    assert manifest.metadata["plugin_version"] == "1.2.0" and manifest.metadata["component_kind"] == "Runner"


def test_config_schema_items_become_config_fields() -> None:
    config = [
        {"name": "model", "type": "llm-model-selector", "label": {"en_US": "Model"}, "required": True},
        {"name": "temperature", "type": "float", "label": {"en_US": "T"}, "default": 0.7},
        {"name": "turns", "type": "integer", "label": {"en_US": "Turns"}, "default": "5"},
        {"name": "mode", "type": "select", "label": {"en_US": "Mode"}, "default": "a",
         "options": [{"name": "a", "label": {"en_US": "A"}}, {"name": "b", "label": {"en_US": "B"}}]},
        {"name": "free", "type": "select", "label": {"en_US": "Free"}},  # no options: a string
        {"name": "api-key", "type": "secret", "label": {"en_US": "Key"}},
        {"name": "prompt", "type": "prompt-editor", "label": {"en_US": "Prompt"}},
        {"name": "kbs", "type": "knowledge-base-multi-selector", "label": {"en_US": "KBs"}},
        {"name": "tags", "type": "array[string]", "label": {"en_US": "Tags"}, "default": ["x"]},
        {"name": "odd", "type": "some-future-widget", "label": {"en_US": "Odd"}, "default": {"k": 1}},
        {"name": "flag", "type": "boolean", "label": {"en_US": "Flag"}, "default": "yes"},  # unusable default
    ]  # fmt: skip
    fields = {f.name: f for f in translate(_entry(config=config), RUNNER).config_schema}
    T = manifest_pb2
    assert {n: f.type for n, f in fields.items()} == {
        "model": T.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        "temperature": T.CONFIG_FIELD_TYPE_NUMBER,
        "turns": T.CONFIG_FIELD_TYPE_INTEGER,
        "mode": T.CONFIG_FIELD_TYPE_SELECT,
        "free": T.CONFIG_FIELD_TYPE_STRING,
        "api-key": T.CONFIG_FIELD_TYPE_SECRET,
        "prompt": T.CONFIG_FIELD_TYPE_PROMPT_EDITOR,
        "kbs": T.CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR,
        "tags": T.CONFIG_FIELD_TYPE_STRING_LIST,
        "odd": T.CONFIG_FIELD_TYPE_JSON,
        "flag": T.CONFIG_FIELD_TYPE_BOOLEAN,
    }
    assert fields["model"].required
    assert fields["turns"].default_value.number_value == 5
    assert [o.name for o in fields["mode"].options] == ["a", "b"]
    assert not fields["flag"].HasField("default_value")


def test_a_manifest_this_protocol_cannot_carry_is_refused() -> None:
    entry = _entry()
    entry["manifest"]["id"] = "plugin:acme/agent/has space"
    with pytest.raises(ManifestError):
        translate(entry, RUNNER)


# -- results ------------------------------------------------------------------------------------
def _dump(result: RunnerResult) -> dict[str, Any]:
    return result.model_dump(mode="json")


def test_cumulative_all_content_deltas_become_increments() -> None:
    t = ResultTranslator()
    out = [
        t.translate(
            _dump(RunnerResult.message_delta(RUN, MessageChunk(role="assistant", content=c, all_content=a)))
        )
        for c, a in [("Hel", "Hel"), ("lo", "Hello"), ("", "Hello"), (" you", "Hello you")]
    ]
    assert out[2] is None  # nothing new: nothing sent
    deltas = [r.message_delta for r in out if r is not None]
    assert [d.text for d in deltas] == ["Hel", "lo", " you"]
    assert not any(d.HasField("cumulative_text") for d in deltas)


def test_snapshot_deltas_and_rewrites_keep_the_host_buffer_right() -> None:
    t = ResultTranslator()

    def delta(content: str, final: bool = False) -> Any:
        chunk = MessageChunk(role="assistant", content=content, is_final=final)
        return t.translate(_dump(RunnerResult.message_delta(RUN, chunk))).message_delta

    assert delta("draft").text == "draft"
    assert delta("draft one").text == " one"
    rewritten = delta("final answer")  # not an extension of what was sent: the host replaces its buffer
    assert rewritten.text == "" and rewritten.cumulative_text == "final answer"
    closing = delta("final answer!", final=True)
    assert closing.text == "!" and closing.cumulative_text == "final answer!"


def test_every_result_type_maps() -> None:
    t = ResultTranslator()
    usage = LLMTokenUsage(prompt_tokens=7, completion_tokens=3, total_tokens=10)
    request = InteractionRequest(
        interaction_id="form-1",
        kind="form",
        title="Details",
        fields=[
            InteractionField(
                id="size",
                label="Size",
                type="select",
                required=True,
                options=[InteractionOption(value="s", label="Small")],
                default="s",
            ),
        ],
        actions=[InteractionAction(id="ok", label="OK", style="primary")],
        fallback_text="Reply with a size.",
        expires_at=int(time.time()) + 600,
    )
    produced = [
        RunnerResult.message_completed(RUN, Message(role="assistant", content="done"), file_ids=["f1"]),
        RunnerResult.tool_call_started(RUN, "c1", "add", {"a": 1}),
        RunnerResult.tool_call_completed(RUN, "c1", "add", error="bad input"),
        RunnerResult.state_updated(RUN, "k", {"v": 1}, scope="actor"),
        RunnerResult.interaction_requested(RUN, request),
        RunnerResult.action_requested(RUN, "platform.poke", target={"id": "u"}),
        RunnerResult(run_id=RUN, type="processor.log", data={"text": "note", "level": "error"}),
        RunnerResult.run_completed(RUN, Message(role="assistant", content="bye"), usage=usage),
    ]
    out = [t.translate(_dump(r)) for r in produced]
    assert [r.WhichOneof("payload") for r in out if r] == [
        "message_completed", "tool_call_started", "tool_call_completed", "state_updated",
        "interaction_requested", "action_requested", "run_log", "run_completed",
    ]  # fmt: skip
    assert out[0] and out[0].message_completed.message.content == "done"
    assert out[2] and out[2].tool_call_completed.error_message == "bad input"
    assert out[3] and out[3].state_updated.scope == common_pb2.STATE_SCOPE_ACTOR
    asked = out[4].interaction_requested.interaction if out[4] else None
    assert asked is not None and asked.kind == common_pb2.INTERACTION_KIND_FORM
    assert (
        asked.fields[0].type == common_pb2.INTERACTION_FIELD_TYPE_SELECT
        and asked.fields[0].default_value.string_value == "s"
    )
    assert (
        asked.actions[0].style == common_pb2.INTERACTION_ACTION_STYLE_PRIMARY and asked.expires_at.seconds > 0
    )
    assert out[6] and out[6].run_log.text == "note"
    assert out[7] and out[7].run_completed.message.content == "bye" and out[7].usage.total_tokens == 10
    assert t.translate({"run_id": RUN, "type": "box.future.thing", "data": {}}) is None


@pytest.mark.parametrize(
    ("code", "expected", "retryable"),
    [
        ("runner.timeout", "deadline_exceeded", True),
        ("runner.exception", "runner.exception", False),
        ("runner.forward_exception", "langbot.plugin_crashed", True),
        ("runner.plugin_not_found", "langbot.plugin_unavailable", True),
        ("acme.quota", "acme.quota", False),
    ],
)
def test_failure_codes_map_to_this_protocols(code: str, expected: str, retryable: bool) -> None:
    out = ResultTranslator().translate(_dump(RunnerResult.run_failed(RUN, "went wrong", code=code)))
    assert out is not None
    failed = out.run_failed
    assert (failed.code, failed.retryable, failed.message) == (expected, retryable, "went wrong")
    assert failed.details["kind"]
    if code != expected:
        assert failed.details["langbot_code"] == code


def test_a_result_this_protocol_refuses_is_dropped_not_fatal() -> None:
    t = ResultTranslator()
    bad_scope = {"run_id": RUN, "type": "state.updated", "data": {"scope": "galaxy", "key": "k", "value": 1}}
    assert t.translate(bad_scope) is None
    assert t.translate({"run_id": RUN, "type": "action.requested", "data": {"action": "interaction.requested",
                        "payload": {"interaction_id": "x", "kind": "poll", "title": "t", "fallback_text": "f"}}}) is None  # fmt: skip
    after = t.translate(_dump(RunnerResult.run_completed(RUN, Message(role="assistant", content="ok"))))
    assert after is not None and after.run_completed.message.content == "ok"
