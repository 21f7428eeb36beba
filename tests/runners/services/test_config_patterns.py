"""A manifest field's `pattern` is one rule for the runner (before a run) and the host's `config check`:
the values one refuses, the other refuses too (e.g. Langflow's `flow-id: a/b`, which would change the
URL path)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.manifest import ManifestError, validate_manifest
from agentrunner.runner import Runner
from agentrunner.testing import HostDouble
from agentrunner.v1 import manifest_pb2
from agentrunner_host.config.model import AgentConfig, HostConfig
from agentrunner_host.registry.check import check_runner_config
from agentrunner_runners.dashscope import DashScopeRunner
from agentrunner_runners.langflow import LangflowRunner

CASES = [
    (LangflowRunner, {"base-url": "http://127.0.0.1:9", "flow-id": "a/b"}, "flow-id"),
    (LangflowRunner, {"base-url": "http://127.0.0.1:9", "flow-id": "../admin"}, "flow-id"),
    (DashScopeRunner, {"api-key": "sk-x", "app-id": "app/1"}, "app-id"),
]


def config_check(runner: type[Runner], runner_config: dict[str, Any]) -> list[str]:
    manifest = runner().get_manifest()
    agent = AgentConfig(id="a", runner_id=manifest.id, runner_config=runner_config)
    return [p.line() for p in check_runner_config(HostConfig(agents=[agent]), 0, agent, manifest)]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(("runner", "cfg", "field"), CASES)
async def test_config_check_and_the_runner_refuse_the_same_value(
    host: HostDouble, runner: type[Runner], cfg: dict[str, Any], field: str
) -> None:
    # (a plain-text api-key also gets its own warning; the pattern is the one error)
    lines = [line for line in config_check(runner, cfg) if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: agents.0.runner_config.{field}: "), lines
    assert "does not match the pattern" in lines[0]
    out = await host.run(runner, "hello", config=cfg)
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == field


@pytest.mark.parametrize(
    "runner_config",
    [
        {"base-url": "http://127.0.0.1:9", "flow-id": "2f5b1c1e-0d9a-4a51-9c0e-3b1f0c6a7d21"},
        {"base-url": "http://127.0.0.1:9", "flow-id": "my_endpoint-v1.2"},
    ],
)
def test_flow_ids_and_endpoint_names_pass_config_check(runner_config: dict[str, Any]) -> None:
    assert config_check(LangflowRunner, runner_config) == []


def test_a_secret_that_does_not_match_is_not_quoted() -> None:
    from agentrunner.config import ConfigInvalid, check_value

    field = manifest_pb2.ConfigField(
        name="token", type=manifest_pb2.CONFIG_FIELD_TYPE_SECRET, pattern="^tok-[a-z]+$"
    )
    with pytest.raises(ConfigInvalid) as caught:
        check_value(field, "WRONG-secret-value")
    assert "WRONG-secret-value" not in str(caught.value) and "does not match" in str(caught.value)


def test_a_manifest_with_a_broken_or_misplaced_pattern_is_refused() -> None:
    manifest = LangflowRunner().get_manifest()
    broken = manifest_pb2.RunnerManifest()
    broken.CopyFrom(manifest)
    broken.config_schema[0].pattern = "^(unclosed"
    with pytest.raises(ManifestError, match="pattern: not a regular expression"):
        validate_manifest(broken)
    misplaced = manifest_pb2.RunnerManifest()
    misplaced.CopyFrom(manifest)
    [streaming] = [f for f in misplaced.config_schema if f.name == "streaming"]
    streaming.pattern = "^x$"
    with pytest.raises(ManifestError, match="only string-valued fields"):
        validate_manifest(misplaced)
