"""The one table of component kinds against the installed runtime: discovery asks only for the kinds
whose action the runtime declares (0.7.18 has `Runner` only; asking it for `list_agent_runners` makes it
log "Runtime action list_agent_runners failed" at every start), and a runtime that declares
`AgentRunner` gets asked for both through the same row."""

from __future__ import annotations

import enum
import sys
import types

import pytest

from agentrunner_runners.langbot_bridge.kinds import AGENT_RUNNER, KINDS, RUNNER, installed_kinds

ENUMS = "langbot_plugin.entities.io.actions.enums"


class LangBotToRuntimeAction(enum.Enum):
    """A runtime's actions enum that declares the AgentRunner kind (the SDK's development branch)."""

    LIST_RUNNERS = "list_runners"
    LIST_AGENT_RUNNERS = "list_agent_runners"


def test_the_released_runtime_is_asked_for_runners_only() -> None:
    assert installed_kinds() == (RUNNER,)
    assert KINDS == (RUNNER, AGENT_RUNNER)  # the table keeps the unreleased kind


def test_a_runtime_that_declares_agent_runners_is_asked_for_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, ENUMS, types.SimpleNamespace(LangBotToRuntimeAction=LangBotToRuntimeAction)
    )
    assert installed_kinds() == (RUNNER, AGENT_RUNNER)


def test_an_enum_it_cannot_read_asks_for_every_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, ENUMS, types.SimpleNamespace())
    assert installed_kinds() == KINDS
