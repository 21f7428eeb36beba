"""The protocol's error model (PROTOCOL_V1 §9, proto `errors.proto`), shared by the host and the SDK.

Every error crosses the wire as a `google.rpc.Status` carrying exactly one `google.rpc.ErrorInfo` in the
`agentrunner.langbot.app` domain. `AgentRunnerError` is the one Python type for it: servers raise it and
`abort_with` turns it into a status; clients get it back from `from_rpc_error`, as the subclass keyed by
its reason. A `google.rpc.RetryInfo` detail (when to try again, for `RATE_LIMITED`) travels as
`retry_delay`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from agentrunner.v1 import errors_pb2

DOMAIN = "agentrunner.langbot.app"

_REASON_PREFIX = "ERROR_REASON_"
#: an error's message and each metadata value are cut to these lengths (they quote inputs: a 100k-character
#: id must not turn a NOT_FOUND into a status whose trailer exceeds gRPC's metadata limit)
MESSAGE_MAX_CHARS = 512
METADATA_VALUE_MAX_CHARS = 200
#: field violations carried in a `google.rpc.BadRequest` (the first ones)
VIOLATIONS_MAX = 20


def bounded(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (an ellipsis marks the cut), NUL characters escaped: what an
    error may carry of an input, in a status, a log line or an audit record."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reason_name(reason: errors_pb2.ErrorReason.ValueType) -> str:
    """The wire string of a reason enum value (`ERROR_REASON_NOT_FOUND` -> `NOT_FOUND`)."""
    return errors_pb2.ErrorReason.Name(reason).removeprefix(_REASON_PREFIX)


class AgentRunnerError(Exception):
    """An error with a protocol reason, a gRPC code and a retryable flag."""

    reason: ClassVar[str] = "RUNTIME_ERROR"
    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    default_retryable: ClassVar[bool] = False
    #: Spec code (PROTOCOL_V1 §9) for runners that report errors in `run.failed` or tool results.
    spec_code: ClassVar[str] = "runtime_error"

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
        code: grpc.StatusCode | None = None,
        retry_delay: float | None = None,
    ) -> None:
        message = bounded(message, MESSAGE_MAX_CHARS)
        super().__init__(message)
        self.message = message
        #: Seconds the caller should wait before trying again (`google.rpc.RetryInfo`), when given.
        self.retry_delay = retry_delay
        self.retryable = self.default_retryable if retryable is None else retryable
        self.metadata: dict[str, str] = {
            k: bounded(str(v), METADATA_VALUE_MAX_CHARS) for k, v in (metadata or {}).items()
        }
        #: `(field path, description)` pairs sent as a `google.rpc.BadRequest` (INVALID_ARGUMENT)
        self.violations: list[tuple[str, str]] = []
        if code is not None:
            self.status_code = code
        else:
            self.status_code = self.code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason}, retryable={self.retryable})"

    def to_status(self) -> status_pb2.Status:
        """The `google.rpc.Status` with exactly one `ErrorInfo`, plus one `BadRequest` when the error
        names fields (AIP-193: each detail type at most once)."""
        info = error_details_pb2.ErrorInfo(
            reason=self.reason,
            domain=DOMAIN,
            metadata={**self.metadata, "retryable": "true" if self.retryable else "false"},
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        details = [detail]
        if self.retry_delay is not None:
            retry = error_details_pb2.RetryInfo()
            retry.retry_delay.FromNanoseconds(max(int(self.retry_delay * 1e9), 0))
            details.append(any_pb2.Any())
            details[-1].Pack(retry)
        if self.violations:
            bad = error_details_pb2.BadRequest()
            for field, description in self.violations[:VIOLATIONS_MAX]:
                bad.field_violations.add(field=field, description=description)
            packed = any_pb2.Any()
            packed.Pack(bad)
            details.append(packed)
        return status_pb2.Status(code=self.status_code.value[0], message=self.message, details=details)


class UnauthorizedError(AgentRunnerError):
    """The resource, operation or scope is not in the run's authorization snapshot."""

    reason = "UNAUTHORIZED"
    code = grpc.StatusCode.PERMISSION_DENIED
    spec_code = "unauthorized"


class CredentialsInvalidError(AgentRunnerError):
    """The client credentials (API key, client certificate) are missing, unknown or expired."""

    reason = "CREDENTIALS_INVALID"
    code = grpc.StatusCode.UNAUTHENTICATED
    spec_code = "unauthorized"


class RunTokenInvalidError(AgentRunnerError):
    """The run token is missing, unknown, expired, revoked or bound to another run."""

    reason = "RUN_TOKEN_INVALID"
    code = grpc.StatusCode.UNAUTHENTICATED
    spec_code = "unauthorized"


class NotFoundError(AgentRunnerError):
    """The resource does not exist or is not visible to this run."""

    reason = "NOT_FOUND"
    code = grpc.StatusCode.NOT_FOUND
    spec_code = "not_found"


class DeadlineExceededError(AgentRunnerError):
    """The run deadline or the call timeout passed."""

    reason = "DEADLINE_EXCEEDED"
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    default_retryable = True
    spec_code = "deadline_exceeded"


class PayloadTooLargeError(AgentRunnerError):
    """The request or the response exceeds a size cap."""

    reason = "PAYLOAD_TOO_LARGE"
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    spec_code = "payload_too_large"


class RateLimitedError(AgentRunnerError):
    """The host or a provider is rate limiting."""

    reason = "RATE_LIMITED"
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_retryable = True
    spec_code = "rate_limited"


class InvalidArgumentError(AgentRunnerError):
    """A field is missing or malformed; `metadata['field']` names it (the first of `violations`, which
    go on the wire as a `google.rpc.BadRequest`)."""

    reason = "INVALID_ARGUMENT"
    code = grpc.StatusCode.INVALID_ARGUMENT
    spec_code = "invalid_argument"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        violations: Sequence[tuple[str, str]] = (),
        **kwargs: Any,
    ) -> None:
        metadata = dict(kwargs.pop("metadata", None) or {})
        if field is None and violations:
            field = violations[0][0]
        if field is not None:
            metadata.setdefault("field", field)
        super().__init__(message, metadata=metadata, **kwargs)
        self.violations = [
            (bounded(f, METADATA_VALUE_MAX_CHARS), bounded(d, METADATA_VALUE_MAX_CHARS))
            for f, d in (violations or ([(field, self.message)] if field else []))
        ]

    @property
    def field(self) -> str | None:
        """The request field the error names (`metadata["field"]`), for pointing the author at the bad input."""
        return self.metadata.get("field")


class RuntimeFailureError(AgentRunnerError):
    """The host or a downstream capability failed."""

    reason = "RUNTIME_ERROR"
    code = grpc.StatusCode.INTERNAL
    spec_code = "runtime_error"


class HostRefusedError(RuntimeFailureError):
    """The host ended a client-streaming call (`UploadArtifact`, `Control`) before it had read the whole
    request, and grpc lost the status it sent (`agentrunner.refusal`): the host refused the call."""


class RunnerUnavailableError(AgentRunnerError):
    """The runner endpoint cannot be reached."""

    reason = "RUNNER_UNAVAILABLE"
    code = grpc.StatusCode.UNAVAILABLE
    default_retryable = True
    spec_code = "runtime_error"


class BindingNotFoundError(AgentRunnerError):
    """No enabled binding matches the event."""

    reason = "BINDING_NOT_FOUND"
    code = grpc.StatusCode.NOT_FOUND
    spec_code = "not_found"


class FailedPreconditionError(AgentRunnerError):
    """The operation does not apply in the current state."""

    reason = "FAILED_PRECONDITION"
    code = grpc.StatusCode.FAILED_PRECONDITION
    spec_code = "invalid_argument"


class NotImplementedFeatureError(AgentRunnerError):
    """The capability is reserved in v1."""

    reason = "NOT_IMPLEMENTED"
    code = grpc.StatusCode.UNIMPLEMENTED
    spec_code = "unauthorized"


class AlreadyExistsError(AgentRunnerError):
    """The event id was already submitted with different content."""

    reason = "ALREADY_EXISTS"
    code = grpc.StatusCode.ALREADY_EXISTS
    spec_code = "invalid_argument"


ERROR_TYPES: dict[str, type[AgentRunnerError]] = {
    cls.reason: cls
    for cls in (
        UnauthorizedError,
        CredentialsInvalidError,
        RunTokenInvalidError,
        NotFoundError,
        DeadlineExceededError,
        PayloadTooLargeError,
        RateLimitedError,
        InvalidArgumentError,
        RuntimeFailureError,
        RunnerUnavailableError,
        BindingNotFoundError,
        FailedPreconditionError,
        NotImplementedFeatureError,
        AlreadyExistsError,
    )
}

# Every reason the contract defines has exactly one Python type.
assert set(ERROR_TYPES) == {
    reason_name(v) for v in errors_pb2.ErrorReason.values() if v != errors_pb2.ERROR_REASON_UNSPECIFIED
}

# Used when a peer sends a status without our ErrorInfo (a proxy, a crashed server, a foreign runner).
_FALLBACK_BY_CODE: dict[grpc.StatusCode, type[AgentRunnerError]] = {
    grpc.StatusCode.PERMISSION_DENIED: UnauthorizedError,
    grpc.StatusCode.UNAUTHENTICATED: RunTokenInvalidError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNIMPLEMENTED: NotImplementedFeatureError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: PayloadTooLargeError,
}
_RETRYABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
)


def _status_code(value: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN


def _retry_delay(status: status_pb2.Status) -> float | None:
    for detail in status.details:
        retry = error_details_pb2.RetryInfo()
        if detail.Is(retry.DESCRIPTOR) and detail.Unpack(retry):
            return float(retry.retry_delay.ToNanoseconds()) / 1e9
    return None


def from_rpc_error(error: grpc.RpcError) -> AgentRunnerError:
    """The typed error carried by a failed call (`grpc.aio.AioRpcError` or a sync `grpc.RpcError`)."""
    # (grpc.aio's errors are not `grpc.Call`s, but have what `from_call` reads from one)
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or str(code)
    if status is not None:
        retry_delay = _retry_delay(status)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
                cls = ERROR_TYPES.get(info.reason, RuntimeFailureError)
                metadata = dict(info.metadata)
                retryable = metadata.pop("retryable", "false") == "true"
                typed = cls(
                    status.message or message,
                    retryable=retryable,
                    metadata=metadata,
                    code=code,
                    retry_delay=retry_delay,
                )
                typed.violations = _violations(status)
                return typed
    if code == grpc.StatusCode.UNAVAILABLE:
        return RuntimeFailureError(message, retryable=True, code=code)
    cls = _FALLBACK_BY_CODE.get(code, RuntimeFailureError)
    return cls(message, retryable=code in _RETRYABLE_CODES or None, code=code)


def _violations(status: status_pb2.Status) -> list[tuple[str, str]]:
    """The field violations of a status's `google.rpc.BadRequest`, if it carries one."""
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Is(bad.DESCRIPTOR) and detail.Unpack(bad):
            return [(v.field, v.description) for v in bad.field_violations]
    return []


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], error: AgentRunnerError) -> NoReturn:
    """Ends a server call with the error's rich status (the one server-side mapping point)."""
    await context.abort_with_status(rpc_status.to_status(error.to_status()))
    raise AssertionError("unreachable: abort_with_status raises")  # pragma: no cover


def status_code_name(code: int) -> str:
    """Name of a numeric `google.rpc.Code`, for logs."""
    return code_pb2.Code.Name(code) if code in code_pb2.Code.values() else str(code)
