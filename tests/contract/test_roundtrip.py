"""Every contract message survives binary and JSON round trips with every field set."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from agentrunner import v1
from tests.contract.populate import variants

MESSAGES: list[type[Message]] = sorted(
    {
        cls
        for module in (getattr(v1, name) for name in v1.__all__)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, Message) and cls.__module__ == module.__name__
    },
    key=lambda c: c.DESCRIPTOR.full_name,
)


def test_every_message_is_covered() -> None:
    # Guard against the discovery above silently finding nothing.
    names = {c.DESCRIPTOR.full_name for c in MESSAGES}
    assert "agentrunner.v1.RunContext" in names
    assert "agentrunner.v1.RunResult" in names
    assert len(names) > 100


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.DESCRIPTOR.name)
def test_binary_and_json_round_trip(cls: type[Message]) -> None:
    for original in variants(cls):
        wire = original.SerializeToString(deterministic=True)
        decoded = cls.FromString(wire)
        assert decoded == original
        assert decoded.SerializeToString(deterministic=True) == wire

        text = json_format.MessageToJson(original)
        parsed = json_format.Parse(text, cls())
        assert parsed == original, f"JSON round trip changed {cls.DESCRIPTOR.full_name}: {text}"
        # Nested message fields really were populated (no vacuous round trips).
        if cls.DESCRIPTOR.fields:
            assert original.ListFields(), cls.DESCRIPTOR.full_name
