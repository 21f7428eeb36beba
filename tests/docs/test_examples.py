"""The documented example configuration stays valid, and a broken copy fails with file, path and reason."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from agentrunner_host.config.model import ConfigError, load_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "host.yaml"


def test_example_host_config_loads() -> None:
    config = load_config(EXAMPLE)
    assert {a.id for a in config.agents} == {"echo", "assistant"}
    assert {b.id for b in config.bindings} == {"default", "echo-bot", "ignore-recalls"}
    assert config.knowledge_bases[0].source_dir == "examples/knowledge"
    assert (ROOT / config.knowledge_bases[0].source_dir).is_dir()


def _broken(tmp_path: pathlib.Path, edit) -> str:
    data = yaml.safe_load(EXAMPLE.read_text())
    edit(data)
    broken = tmp_path / "host.yaml"
    broken.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_config(broken)
    message = str(err.value)
    assert str(broken) in message
    return message


def test_bad_field_names_file_path_and_reason(tmp_path: pathlib.Path) -> None:
    message = _broken(tmp_path, lambda d: d["agents"][1].update(timeout_seconds=-1))
    assert "agents.1.timeout_seconds" in message
    assert "greater than 0" in message


def test_binding_tie_is_a_config_error(tmp_path: pathlib.Path) -> None:
    # `ignore-recalls` at priority 0 ties with `default` (message.*) for message.recalled.
    message = _broken(tmp_path, lambda d: d["bindings"][2].update(priority=0))
    assert "bindings.2" in message and "ties with bindings.0" in message


def test_a_typo_in_a_capability_section_is_refused(tmp_path: pathlib.Path) -> None:
    message = _broken(tmp_path, lambda d: d["models"][0].update(api_key_envv="OPENAI_API_KEY"))
    assert "models.0.api_key_envv" in message
    message = _broken(tmp_path, lambda d: d["tools"]["native"].update(fetch_url_alow=["https://x/"]))
    assert "tools.native.fetch_url_alow" in message


def test_the_compose_deployment_is_consistent() -> None:
    """compose.yaml (not built in CI: no Docker engine there) and its host config agree: every runner
    endpoint the host dials is a service, the console is token-protected, the migration runs first."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    config = load_config(ROOT / "examples" / "compose" / "host.yaml")
    for endpoint in config.runners:
        assert endpoint.address.split(":")[0] in services, endpoint.address
    host = services["host"]
    assert "AGENTRUNNER_CONSOLE_TOKEN" in host["environment"] and config.console.address == "0.0.0.0:8080"
    assert host["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert (ROOT / "Dockerfile").read_text().count("uv==0.13.9") == 1  # the Makefile's pinned uv
