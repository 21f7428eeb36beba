"""`AGENTRUNNER_*` environment overrides (read without pydantic-settings since issue 37): names in any
case, JSON objects for the per-id maps, constructor values first, and a one-line error naming the
variable, never its value, when one does not parse."""

from __future__ import annotations

import pytest

from agentrunner_host.config.model import ConfigError, HostEnv, parse_config


def test_variables_override_the_config_and_the_maps_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRUNNER_LISTEN_ADDRESS", "127.0.0.1:7001")
    monkeypatch.setenv("agentrunner_instance_id", "replica-b")  # (any case, as pydantic-settings read it)
    monkeypatch.setenv("AGENTRUNNER_RUNNER_TOKENS", '{"ref": "s3cret"}')
    config = parse_config({"listen": {"address": "127.0.0.1:0"}})
    assert config.listen.address == "127.0.0.1:7001"
    assert config.instance_id == "replica-b"
    assert HostEnv().runner_tokens == {"ref": "s3cret"}
    assert HostEnv(listen_address="127.0.0.1:7002").listen_address == "127.0.0.1:7002"


@pytest.mark.parametrize("value", ['{"ref": s3cret}', '["s3cret"]'])
def test_a_map_that_does_not_parse_is_a_one_line_error_without_the_secret(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AGENTRUNNER_RUNNER_TOKENS", value)
    with pytest.raises(ConfigError) as caught:
        parse_config({})
    message = str(caught.value)
    assert "\n" not in message and "s3cret" not in message
    assert "runner_tokens" in message.lower()
