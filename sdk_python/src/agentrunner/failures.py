"""The failure-kind vocabulary: one small set of `run.failed` `details.kind` values for every runner.

A failure's `code` is runner-specific (`claude_code.process_failed`, `dify.http_error`, ...); its
`details.kind` says what went wrong in words every client knows, so a client can act on a failure (retry
later, ask an admin to fix the config, show "the answer was empty") without knowing every runner.
docs/protocol.md §3 lists the kinds. Usage the source reported stays on the `run.failed` result.

    raise RunnerFailure("dify.http_error", "Dify answered 503", kind=FailureKind.HTTP_ERROR, retryable=True)
    yield results.failed("codex.turn_failed", msg, kind="turn_failed", usage=usage)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "HOST_CODE_KINDS",
    "FailureKind",
    "RunnerFailure",
    "failure_kind",
    "kind_for_error_reason",
]


class FailureKind(enum.StrEnum):
    """What went wrong, independent of the runner. Values are the wire strings of `details.kind`."""

    #: The agent's runner configuration is missing a value or has a wrong one (`details.field`).
    CONFIG_INVALID = "config_invalid"
    #: The event's input cannot be used (empty text, an attachment the source cannot take).
    INPUT_INVALID = "input_invalid"
    #: The external service or CLI rejected the credentials (HTTP 401/403, not logged in).
    AUTH_ERROR = "auth_error"
    #: The external service is rate limiting or overloaded (HTTP 429, 529); retry later.
    RATE_LIMITED = "rate_limited"
    #: The runner's own timeout or the run deadline passed.
    TIMEOUT = "timeout"
    #: The external service could not be reached (connection refused, DNS, TLS, dropped connection).
    CONNECTION_ERROR = "connection_error"
    #: The external service answered with an HTTP error status.
    HTTP_ERROR = "http_error"
    #: The external service or CLI reported an API error in an otherwise well-formed answer.
    API_ERROR = "api_error"
    #: An error event arrived inside an otherwise successful stream.
    STREAM_ERROR_EVENT = "stream_error_event"
    #: The source's output could not be understood (invalid JSON, a JSON-RPC protocol violation).
    PROTOCOL_ERROR = "protocol_error"
    #: The source finished without any answer text.
    EMPTY_RESPONSE = "empty_response"
    #: The source's stream ended without its final result (no `result` line, no `turn.completed`).
    NO_RESULT = "no_result"
    #: A harness process could not be started (command not found, not executable).
    START_FAILED = "start_failed"
    #: A harness process exited with a failure.
    PROCESS_FAILED = "process_failed"
    #: The harness stopped at its turn limit before answering.
    MAX_TURNS = "max_turns"
    #: The harness reported that its turn failed.
    TURN_FAILED = "turn_failed"
    #: The harness's turn was interrupted before it finished.
    INTERRUPTED = "interrupted"
    #: A client, the host or the runner cancelled the run.
    CANCELLED = "cancelled"
    #: A call to the host's API failed (refused, not found, host error).
    HOST_ERROR = "host_error"
    #: A bug in the runner: an exception it did not handle.
    INTERNAL_ERROR = "internal_error"


#: Kinds whose failures are usually worth retrying later (a runner may still decide otherwise).
RETRYABLE_KINDS = frozenset({FailureKind.RATE_LIMITED, FailureKind.TIMEOUT, FailureKind.CONNECTION_ERROR})

#: `details.kind` of the failure codes the SDK and the host set themselves (docs/protocol.md §3).
HOST_CODE_KINDS: dict[str, FailureKind] = {
    "runner.config_invalid": FailureKind.CONFIG_INVALID,
    "runner.exception": FailureKind.INTERNAL_ERROR,
    "runner.no_terminal": FailureKind.NO_RESULT,
    "runner.empty_output": FailureKind.EMPTY_RESPONSE,
    "runner.unavailable": FailureKind.CONNECTION_ERROR,
    "runner.stream_broken": FailureKind.CONNECTION_ERROR,
    "runner.protocol_error": FailureKind.PROTOCOL_ERROR,
    "deadline_exceeded": FailureKind.TIMEOUT,
    "cancelled": FailureKind.CANCELLED,
    "host.store_error": FailureKind.HOST_ERROR,
    "host.error": FailureKind.HOST_ERROR,
}

#: `google.rpc.ErrorInfo` reasons of a failed host API call -> the kind a run failing on it carries.
_REASON_KINDS: dict[str, FailureKind] = {
    "DEADLINE_EXCEEDED": FailureKind.TIMEOUT,
    "RATE_LIMITED": FailureKind.RATE_LIMITED,
    "INVALID_ARGUMENT": FailureKind.INPUT_INVALID,
}


def failure_kind(kind: str | FailureKind) -> FailureKind:
    """The vocabulary member for `kind`; raises `ValueError` for a word outside the vocabulary."""
    try:
        return FailureKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in FailureKind)
        raise ValueError(f"unknown failure kind {kind!r}; use one of: {allowed}") from None


def kind_for_error_reason(reason: str) -> FailureKind:
    """The kind of a run that fails because a host API call failed with `reason`."""
    return _REASON_KINDS.get(reason, FailureKind.HOST_ERROR)


class RunnerFailure(Exception):
    """Raised inside `run()` (or anything it awaits) to end the run with this `run.failed` result.

    The engine turns it into `results.failed(code, message, kind=..., retryable=..., details=...,
    usage=...)`; unlike any other exception it is an expected outcome, so nothing is logged as a crash.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        kind: str | FailureKind,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
        usage: Any = None,
    ) -> None:
        super().__init__(message)
        if not code:
            raise ValueError("RunnerFailure needs a code")
        self.code = code
        self.message = message
        self.kind = failure_kind(kind)
        self.retryable = self.kind in RETRYABLE_KINDS if retryable is None else retryable
        self.details = dict(details or {})
        #: a `common_pb2.Usage` the source reported before failing, if any
        self.usage = usage

    def __repr__(self) -> str:
        return f"RunnerFailure({self.code!r}, {self.message!r}, kind={self.kind.value}, retryable={self.retryable})"
