"""Runner-config secrets from the environment: `{env: NAME}` for a manifest's secret fields, read when
the host builds a run's context; `config check` names an unset variable and warns about a secret in
plain text, and neither ever shows a value."""

from __future__ import annotations

from typing import Any

import pytest

from agentrunner.v1 import manifest_pb2
from agentrunner_host.config.model import AgentConfig, HostConfig
from agentrunner_host.registry.check import check_runner_config
from agentrunner_host.run.context import RunnerConfigError, effective_runner_config
from agentrunner_runners.coze import CozeRunner
from agentrunner_runners.dashscope import DashScopeRunner
from agentrunner_runners.dify import DifyRunner
from agentrunner_runners.langflow import LangflowRunner
from agentrunner_runners.n8n import N8nRunner
from agentrunner_runners.tbox import TboxRunner

T = manifest_pb2.ConfigFieldType
MANIFEST = N8nRunner.get_manifest()
SECRET = "hdr-value-0123456789"


def n8n_config(**extra: Any) -> dict[str, Any]:
    return {
        "webhook-url": "http://127.0.0.1:9/webhook/x",
        "auth-type": "header",
        "header-name": "X-T",
        **extra,
    }


def check(runner_config: dict[str, Any], manifest: Any = MANIFEST) -> list[str]:
    agent = AgentConfig(id="a", runner_id=manifest.id, runner_config=runner_config)
    return [p.line() for p in check_runner_config(HostConfig(agents=[agent]), 0, agent, manifest)]


def test_an_env_value_reaches_the_runner_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("N8N_TEST_HEADER", SECRET)
    out = effective_runner_config(MANIFEST, n8n_config(**{"header-value": {"env": "N8N_TEST_HEADER"}}))
    assert out["header-value"] == SECRET
    assert out["timeout"] == 120  # the schema's defaults still apply


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_variable_fails_naming_field_and_variable(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("N8N_TEST_HEADER", raising=False)
    else:
        monkeypatch.setenv("N8N_TEST_HEADER", value)
    with pytest.raises(RunnerConfigError) as err:
        effective_runner_config(MANIFEST, n8n_config(**{"header-value": {"env": "N8N_TEST_HEADER"}}))
    assert err.value.metadata["field"] == "header-value"
    assert "N8N_TEST_HEADER is not set" in str(err.value)


def test_only_secret_and_string_fields_take_an_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("N8N_TEST_TIMEOUT", "30")
    with pytest.raises(RunnerConfigError, match="only secret and string fields"):
        effective_runner_config(MANIFEST, n8n_config(timeout={"env": "N8N_TEST_TIMEOUT"}))
    monkeypatch.setenv("N8N_TEST_URL", "http://127.0.0.1:9/webhook/from-env")
    out = effective_runner_config(MANIFEST, n8n_config(**{"webhook-url": {"env": "N8N_TEST_URL"}}))
    assert out["webhook-url"] == "http://127.0.0.1:9/webhook/from-env"


def test_config_check_reports_an_unset_variable_and_a_plain_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("N8N_TEST_HEADER", raising=False)
    where = "agents.0.runner_config.header-value"
    assert check(n8n_config(**{"header-value": {"env": "N8N_TEST_HEADER"}})) == [
        f"error: {where}: environment variable N8N_TEST_HEADER is not set"
    ]
    monkeypatch.setenv("N8N_TEST_HEADER", SECRET)
    assert check(n8n_config(**{"header-value": {"env": "N8N_TEST_HEADER"}})) == []
    plain = check(n8n_config(**{"header-value": SECRET}))
    assert plain == [f"warning: {where}: a secret in plain text in the config file: give it as {{env: NAME}} "
                     "and set the variable NAME where the host runs"]  # fmt: skip
    assert SECRET not in str(plain)


@pytest.mark.parametrize(
    ("runner", "secrets"),
    [
        (N8nRunner, {"basic-password", "jwt-secret", "header-value"}),
        *((r, {"api-key"}) for r in (CozeRunner, DashScopeRunner, DifyRunner, LangflowRunner, TboxRunner)),
    ],
)
def test_every_service_runner_secret_is_marked_and_warned_about(runner: Any, secrets: set[str]) -> None:
    # the manifests' `secret` marking is what `{env: NAME}` is for, what config check warns about in
    # plain text and what the runners redact from every message
    manifest = runner.get_manifest()
    assert {f.name for f in manifest.config_schema if f.type == T.CONFIG_FIELD_TYPE_SECRET} == secrets
    for name in secrets:
        lines = check({name: "plain-value"}, manifest)  # (missing required fields are errors too)
        warning = f"warning: agents.0.runner_config.{name}: a secret in plain text in the config file"
        assert any(line.startswith(warning) for line in lines), lines
        assert "plain-value" not in str(lines)
