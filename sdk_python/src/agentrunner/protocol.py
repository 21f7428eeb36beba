"""Protocol constants shared by the host and the SDK (docs/protocol.md)."""

from __future__ import annotations

import itertools
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
    "run_log": "run.log",
    "interaction_requested": "interaction.requested",
}
TERMINAL_PAYLOADS: Final = frozenset({"run_completed", "run_failed"})

#: `run.completed.finish_reason` of a run whose service only acknowledged the request (it answers
#: asynchronously, elsewhere, e.g. an n8n webhook that responds at once): the one completed run without
#: any output the host accepts (docs/protocol.md §2, rule 7).
FINISH_ACKNOWLEDGED: Final = "acknowledged"

#: Event type of an interaction answer (`HostService.SubmitInteraction`).
INTERACTION_SUBMITTED_EVENT: Final = "interaction.submitted"

#: Structured interaction limits (public SDK / LangBot host caps), checked by the SDK, enforced by the host.
INTERACTION_MAX_FIELDS: Final = 50
INTERACTION_MAX_ACTIONS: Final = 20
INTERACTION_MAX_OPTIONS: Final = 100
INTERACTION_MAX_BYTES: Final = 256 * 1024
INTERACTION_DEFAULT_TTL_SECONDS: Final = 30 * 60
INTERACTION_MAX_TTL_SECONDS: Final = 24 * 60 * 60

#: Largest reply text (`SendReply`, `SendMessage`), in characters.
REPLY_MAX_CHARS: Final = 200_000
#: Largest `run.log` text, in characters (the host truncates longer lines).
RUN_LOG_MAX_CHARS: Final = 10_000

#: Words that make a request variable sensitive (the host never passes it to a runner), plus pairs.
SENSITIVE_VARIABLE_WORDS: Final = frozenset(
    {
        "secret",
        "password",
        "passwd",
        "pwd",
        "token",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "authorization",
        "auth",
        "signature",
        "privatekey",
        "sessionkey",
    }
)
SENSITIVE_VARIABLE_PAIRS: Final = frozenset(
    {("api", "key"), ("private", "key"), ("session", "key"), ("access", "key")}
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_sensitive_variable(key: str) -> bool:
    """Whether a request variable must be filtered: a leading `_` or a secret-like word in its name.

    `api_key`, `apiKey`, `X-Auth-Token`, `db_password` are sensitive; `max_tokens`, `author` are not.
    """
    if key.startswith("_"):
        return True
    words = [w.lower() for w in _WORD.findall(key)]
    if any(w in SENSITIVE_VARIABLE_WORDS for w in words):
        return True
    return any(pair in SENSITIVE_VARIABLE_PAIRS for pair in itertools.pairwise(words))


# The table above must cover the oneof exactly: a new payload needs a spec name here.
assert set(RESULT_TYPES) == {f.name for f in result_pb2.RunResult.DESCRIPTOR.oneofs_by_name["payload"].fields}


def result_type(result: result_pb2.RunResult) -> str | None:
    """The spec type name of a result, or None when its payload is unknown to this reader."""
    kind = result.WhichOneof("payload")
    return RESULT_TYPES.get(kind) if kind else None


def is_terminal(result: result_pb2.RunResult) -> bool:
    """Whether a result ends the run (`run.completed` / `run.failed`): nothing may follow it on the stream."""
    return result.WhichOneof("payload") in TERMINAL_PAYLOADS
