"""Legacy LangBot pipeline configs (`ai.<legacy-runner>` sections, values as LangBot's pipeline forms
store them) migrate with `migrate_pipeline` into configs the official service runners accept as they are."""

from __future__ import annotations

from typing import Any

import pytest

from agentrunner.config import validate_config
from agentrunner.runner import Runner
from agentrunner_host.config.legacy import migrate_pipeline, pipeline_to_agent
from agentrunner_runners.coze import CozeRunner
from agentrunner_runners.dashscope import DashScopeRunner
from agentrunner_runners.dify import DifyRunner
from agentrunner_runners.langflow import LangflowRunner
from agentrunner_runners.n8n import N8nRunner
from agentrunner_runners.tbox import TboxRunner

LEGACY: dict[str, Any] = {
    "ai": {
        "runner": {"runner": "dify-service-api"},
        "dify-service-api": {
            "base-url": "https://dify.example.com/v1",
            "base-prompt": "When the file content is readable, please read the content of this file.",
            "app-type": "agent",
            "api-key": "app-123",
        },
        "n8n-service-api": {
            "webhook-url": "https://n8n.example.com/webhook/abc",
            "auth-type": "jwt",
            "basic-username": "",
            "basic-password": "",
            "jwt-secret": "s3cret",
            "jwt-algorithm": "HS256",
            "header-name": "",
            "header-value": "",
            "timeout": 120,
            "output-key": "response",
        },
        "langflow-api": {
            "base-url": "http://langflow:7860",
            "api-key": "sk-lf",
            "flow-id": "0f0e-flow",
            "input-type": "chat",
            "output-type": "chat",
            "tweaks": '{"ChatInput-1": {"should_store_message": true}}',
        },
        "coze-api": {
            "api-key": "pat_x",
            "bot-id": "7350000000000001",
            "api-base": "https://api.coze.com",
            "auto-save-history": True,
            "timeout": 120.0,
        },
        "dashscope-app-api": {
            "app-type": "workflow",
            "api-key": "sk-x",
            "app-id": "a1b2c3",
            "references_quote": "参考资料来自:",
        },
        "tbox-app-api": {"api-key": "tbox-x", "app-id": "20250101"},
    },
    "output": {"misc": {"remove-think": True, "stream": True}},
}

RUNNERS: dict[str, type[Runner]] = {
    "plugin:langbot/dify-agent/default": DifyRunner,
    "plugin:langbot/n8n-agent/default": N8nRunner,
    "plugin:langbot/langflow-agent/default": LangflowRunner,
    "plugin:langbot/coze-agent/default": CozeRunner,
    "plugin:langbot/dashscope-agent/default": DashScopeRunner,
    "plugin:langbot/tbox-agent/default": TboxRunner,
}


def accepted(runner: type[Runner], config: dict[str, Any]) -> Any:
    """What the runner's `ctx.config` would be (the SDK's schema check, then its config model)."""
    values = validate_config(runner.get_manifest().config_schema, config)
    return runner.config_model.model_validate(values) if runner.config_model else values


@pytest.mark.parametrize("runner_id", sorted(RUNNERS))
def test_every_migrated_section_is_a_valid_runner_config(runner_id: str) -> None:
    migration = migrate_pipeline(LEGACY)
    section = migration.config["ai"]["runner_config"][runner_id]
    accepted(RUNNERS[runner_id], section)


def test_pipeline_level_settings_follow_and_values_keep_their_meaning() -> None:
    migration = migrate_pipeline(LEGACY)
    configs = migration.config["ai"]["runner_config"]
    dify = accepted(DifyRunner, configs["plugin:langbot/dify-agent/default"])
    assert dify.remove_think is True and dify.app_type == "agent" and dify.base_url.endswith("/v1")
    assert any("remove-think" in change for change in migration.changes)
    langflow = accepted(LangflowRunner, configs["plugin:langbot/langflow-agent/default"])
    assert langflow.tweaks == {"ChatInput-1": {"should_store_message": True}}
    n8n = accepted(N8nRunner, configs["plugin:langbot/n8n-agent/default"])
    assert n8n.auth_type == "jwt" and n8n.jwt_secret == "s3cret"
    coze = accepted(CozeRunner, configs["plugin:langbot/coze-agent/default"])
    assert coze.api_base == "https://api.coze.com" and coze.timeout == 120
    dashscope = accepted(DashScopeRunner, configs["plugin:langbot/dashscope-agent/default"])
    assert dashscope.app_type == "workflow" and dashscope.references_quote == "参考资料来自:"
    tbox = accepted(TboxRunner, configs["plugin:langbot/tbox-agent/default"])
    assert tbox.base_url == "https://api.tbox.cn"  # the vendor SDK's fixed host is the default
    agent = pipeline_to_agent(LEGACY, "support")
    assert (
        agent["runner_id"] == "plugin:langbot/dify-agent/default" and agent["runner_config"]["remove-think"]
    )
