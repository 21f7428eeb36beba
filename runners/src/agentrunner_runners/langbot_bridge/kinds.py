"""The one table of plugin component kinds the bridge serves.

`langbot-plugin` 0.7.x ships the `Runner` kind (`list_runners` / `run_runner`, results `RunnerResult`).
LangBot's own runners (its runner collection, the local agent) are written against the newer
`AgentRunner` kind of the SDK's development branch (`list_agent_runners` / `run_agent`, results
`AgentRunResult`), not on PyPI yet. Both carry the same request shape (`{plugin_author, plugin_name,
runner_name, context}`), the same discovery entry (`{plugin_author, plugin_name, runner_name, manifest,
capabilities, permissions, config}`) and the same result envelope (`{run_id, type, data, usage, sequence}`),
so one row per kind is all that differs: the action names and the `runtime.metadata.component_kind`
the plugin checks. Discovery asks a runtime for every kind in this table that the installed runtime
declares (`installed_kinds`); a runtime that does not know a kind answers "Action ... not found", which
the bridge takes as "none of that kind here". Adding the next kind is one row.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ComponentKind:
    #: the component kind in the plugin's component manifest (`kind:`) and `runtime.metadata.component_kind`
    name: str
    #: LangBot -> runtime: discovery (answers `{"runners": [entry, ...]}`)
    list_action: str
    #: LangBot -> runtime: one run, a flow-controlled stream of result envelopes
    run_action: str


RUNNER = ComponentKind(name="Runner", list_action="list_runners", run_action="run_runner")
AGENT_RUNNER = ComponentKind(name="AgentRunner", list_action="list_agent_runners", run_action="run_agent")

#: every kind the bridge asks a runtime for, in this order (a runner id found under two kinds keeps the first)
KINDS: tuple[ComponentKind, ...] = (RUNNER, AGENT_RUNNER)


def installed_kinds(kinds: tuple[ComponentKind, ...] = KINDS) -> tuple[ComponentKind, ...]:
    """The kinds whose discovery action the installed runtime declares (its `LangBotToRuntimeAction`;
    the runtime runs from this interpreter's packages). Asking a 0.7.x runtime for `list_agent_runners`
    is answered "not found" but makes it log a warning at every start. When the enum cannot be read:
    every kind (the "not found" answer covers them)."""
    try:
        enums = importlib.import_module("langbot_plugin.entities.io.actions.enums")
        declared = {str(action.value) for action in enums.LangBotToRuntimeAction}
    except (ImportError, AttributeError, TypeError):
        return kinds
    return tuple(k for k in kinds if k.list_action in declared)


def unknown_action(message: str) -> bool:
    """Whether a runtime's error answer means it does not implement the action at all."""
    return "not found" in message and "Action" in message
