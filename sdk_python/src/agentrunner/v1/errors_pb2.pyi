from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHORIZED: _ClassVar[ErrorReason]
    ERROR_REASON_RUN_TOKEN_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_DEADLINE_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_PAYLOAD_TOO_LARGE: _ClassVar[ErrorReason]
    ERROR_REASON_RATE_LIMITED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_RUNTIME_ERROR: _ClassVar[ErrorReason]
    ERROR_REASON_RUNNER_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_BINDING_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_FAILED_PRECONDITION: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_IMPLEMENTED: _ClassVar[ErrorReason]
    ERROR_REASON_ALREADY_EXISTS: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_UNAUTHORIZED: ErrorReason
ERROR_REASON_RUN_TOKEN_INVALID: ErrorReason
ERROR_REASON_NOT_FOUND: ErrorReason
ERROR_REASON_DEADLINE_EXCEEDED: ErrorReason
ERROR_REASON_PAYLOAD_TOO_LARGE: ErrorReason
ERROR_REASON_RATE_LIMITED: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_RUNTIME_ERROR: ErrorReason
ERROR_REASON_RUNNER_UNAVAILABLE: ErrorReason
ERROR_REASON_BINDING_NOT_FOUND: ErrorReason
ERROR_REASON_FAILED_PRECONDITION: ErrorReason
ERROR_REASON_NOT_IMPLEMENTED: ErrorReason
ERROR_REASON_ALREADY_EXISTS: ErrorReason
