"""Config validation before `run` starts (bad config -> run.failed runner.config_invalid naming the field)."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from pydantic import BaseModel, Field

from agentrunner import Runner, results
from agentrunner.testing import HostDouble

pytestmark = pytest.mark.asyncio

started: list[str] = []


class Configured(Runner):
    manifest = {
        "id": "plugin:test/configured/default",
        "label": "x",
        "config": [
            {"name": "max-round", "type": "integer", "required": True},
            {"name": "temperature", "type": "number", "default": 0.5},
            {
                "name": "mode",
                "type": "select",
                "options": [{"name": "fast"}, {"name": "slow"}],
                "default": "fast",
            },
            {"name": "verbose", "type": "boolean"},
            {"name": "kbs", "type": "knowledge-base-multi-selector", "default": []},
            {"name": "model", "type": "model-fallback-selector"},
        ],
    }

    async def run(self, ctx):
        started.append(ctx.run_id)
        yield results.completed(
            metadata={"config": ctx.config, "round_type": type(ctx.config["max-round"]).__name__}
        )


class Typed(Runner):
    class Config(BaseModel):
        greeting: str = "hi"
        repeat: int = Field(default=1, ge=1, le=3)

    manifest = {
        "id": "plugin:test/typed/default",
        "label": "x",
        "config": [
            {"name": "greeting", "type": "string"},
            {"name": "repeat", "type": "integer", "default": 1},
        ],
    }
    config_model = Config

    async def run(self, ctx):
        yield results.completed(" ".join([ctx.config.greeting] * ctx.config.repeat))


async def test_valid_config_gets_defaults_and_declared_types(host: HostDouble) -> None:
    out = await host.run(Configured, config={"max-round": 3, "model": {"primary": "m1", "fallbacks": ["m2"]}})
    assert out.completed
    assert out.metadata["round_type"] == "int"
    assert out.metadata["config"] == {
        "max-round": 3,
        "temperature": 0.5,
        "mode": "fast",
        "kbs": [],
        "model": {"primary": "m1", "fallbacks": ["m2"]},
    }


@pytest.mark.parametrize(
    ("config", "field", "needle"),
    [
        ({}, "max-round", "required"),
        ({"max-round": 2.5}, "max-round", "integer"),
        ({"max-round": "3"}, "max-round", "integer"),
        ({"max-round": 1, "mode": "turbo"}, "mode", "not one of"),
        ({"max-round": 1, "verbose": "yes"}, "verbose", "boolean"),
        ({"max-round": 1, "kbs": ["a", 2]}, "kbs", "list of strings"),
        ({"max-round": 1, "model": 7}, "model", "model id"),
    ],
)
async def test_bad_config_fails_before_run_and_names_the_field(
    host: HostDouble, config: dict[str, Any], field: str, needle: str
) -> None:
    started.clear()
    out = await host.run(Configured, config=config)
    assert out.types == ["run.failed"]
    assert out.failure is not None and out.failure.code == "runner.config_invalid"
    assert field in out.failure.message and needle in out.failure.message
    assert json_format.MessageToDict(out.failure.details) == {"field": field, "kind": "config_invalid"}
    assert started == []


async def test_config_model_gives_typed_config(host: HostDouble) -> None:
    out = await host.run(Typed, config={"greeting": "yo", "repeat": 2})
    assert out.text == "yo yo"
    bad = await host.run(Typed, config={"repeat": 5})
    assert bad.failure is not None and bad.failure.code == "runner.config_invalid"
    assert "repeat" in bad.failure.message
    assert json_format.MessageToDict(bad.failure.details) == {"field": "repeat", "kind": "config_invalid"}
