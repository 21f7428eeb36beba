"""Protocol constants shared by the host and the SDK (docs/protocol.md)."""

from __future__ import annotations

import re
from typing import Final

from agentrunner.v1 import result_pb2

#: Major protocol version spoken by this implementation.
PROTOCOL_VERSION: Final = "1"

#: Metadata key carrying the run token on every ProxyService call.
RUN_TOKEN_HEADER: Final = "x-agentrunner-run-token"
#: Metadata key carrying the run id on ProxyService calls (informational; the token is authoritative).
RUN_ID_HEADER: Final = "x-agentrunner-run-id"
#: Metadata key carrying a bearer token from clients / hosts to runner endpoints when configured.
AUTHORIZATION_HEADER: Final = "authorization"

#: Runner id format: `plugin:<author>/<name>/<runner>`.
RUNNER_ID_PATTERN: Final = re.compile(
    r"^plugin:[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*$", re.I
)

#: `RunResult.payload` oneof field name -> spec result type (PROTOCOL_V1 §7.3).
RESULT_TYPES: Final[dict[str, str]] = {
    "message_delta": "message.delta",
    "message_completed": "message.completed",
    "tool_call_started": "tool.call.started",
    "tool_call_completed": "tool.call.completed",
    "artifact_created": "artifact.created",
    "state_updated": "state.updated",
    "action_requested": "action.requested",
    "run_completed": "run.completed",
    "run_failed": "run.failed",
}
TERMINAL_PAYLOADS: Final = frozenset({"run_completed", "run_failed"})

# The table above must cover the oneof exactly: a new payload needs a spec name here.
assert set(RESULT_TYPES) == {f.name for f in result_pb2.RunResult.DESCRIPTOR.oneofs_by_name["payload"].fields}


def result_type(result: result_pb2.RunResult) -> str | None:
    """The spec type name of a result, or None when its payload is unknown to this reader."""
    kind = result.WhichOneof("payload")
    return RESULT_TYPES.get(kind) if kind else None


def is_terminal(result: result_pb2.RunResult) -> bool:
    return result.WhichOneof("payload") in TERMINAL_PAYLOADS
