import datetime

from agentrunner.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunLogLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_LOG_LEVEL_UNSPECIFIED: _ClassVar[RunLogLevel]
    RUN_LOG_LEVEL_DEBUG: _ClassVar[RunLogLevel]
    RUN_LOG_LEVEL_INFO: _ClassVar[RunLogLevel]
    RUN_LOG_LEVEL_WARNING: _ClassVar[RunLogLevel]
    RUN_LOG_LEVEL_ERROR: _ClassVar[RunLogLevel]
RUN_LOG_LEVEL_UNSPECIFIED: RunLogLevel
RUN_LOG_LEVEL_DEBUG: RunLogLevel
RUN_LOG_LEVEL_INFO: RunLogLevel
RUN_LOG_LEVEL_WARNING: RunLogLevel
RUN_LOG_LEVEL_ERROR: RunLogLevel

class RunResult(_message.Message):
    __slots__ = ("run_id", "sequence", "timestamp", "usage", "metadata", "message_delta", "message_completed", "tool_call_started", "tool_call_completed", "artifact_created", "state_updated", "action_requested", "run_completed", "run_failed", "run_log", "interaction_requested")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_DELTA_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_CREATED_FIELD_NUMBER: _ClassVar[int]
    STATE_UPDATED_FIELD_NUMBER: _ClassVar[int]
    ACTION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    RUN_FAILED_FIELD_NUMBER: _ClassVar[int]
    RUN_LOG_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    sequence: int
    timestamp: _timestamp_pb2.Timestamp
    usage: _common_pb2.Usage
    metadata: _struct_pb2.Struct
    message_delta: MessageDelta
    message_completed: MessageCompleted
    tool_call_started: ToolCallStarted
    tool_call_completed: ToolCallCompleted
    artifact_created: ArtifactCreated
    state_updated: StateUpdated
    action_requested: ActionRequested
    run_completed: RunCompleted
    run_failed: RunFailed
    run_log: RunLog
    interaction_requested: InteractionRequested
    def __init__(self, run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., message_delta: _Optional[_Union[MessageDelta, _Mapping]] = ..., message_completed: _Optional[_Union[MessageCompleted, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_completed: _Optional[_Union[ToolCallCompleted, _Mapping]] = ..., artifact_created: _Optional[_Union[ArtifactCreated, _Mapping]] = ..., state_updated: _Optional[_Union[StateUpdated, _Mapping]] = ..., action_requested: _Optional[_Union[ActionRequested, _Mapping]] = ..., run_completed: _Optional[_Union[RunCompleted, _Mapping]] = ..., run_failed: _Optional[_Union[RunFailed, _Mapping]] = ..., run_log: _Optional[_Union[RunLog, _Mapping]] = ..., interaction_requested: _Optional[_Union[InteractionRequested, _Mapping]] = ...) -> None: ...

class MessageDelta(_message.Message):
    __slots__ = ("text", "cumulative_text", "contents", "message_id", "metadata", "kind")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    text: str
    cumulative_text: str
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    message_id: str
    metadata: _struct_pb2.Struct
    kind: _common_pb2.MessageKind
    def __init__(self, text: _Optional[str] = ..., cumulative_text: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., message_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., kind: _Optional[_Union[_common_pb2.MessageKind, str]] = ...) -> None: ...

class MessageCompleted(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.AssistantMessage
    def __init__(self, message: _Optional[_Union[_common_pb2.AssistantMessage, _Mapping]] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "parameters")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    parameters: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolCallCompleted(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "result_preview", "error_code", "error_message")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RESULT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    result_preview: _struct_pb2.Struct
    error_code: str
    error_message: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., result_preview: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class ArtifactCreated(_message.Message):
    __slots__ = ("artifact", "content")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    artifact: _common_pb2.ArtifactRef
    content: bytes
    def __init__(self, artifact: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ..., content: _Optional[bytes] = ...) -> None: ...

class StateUpdated(_message.Message):
    __slots__ = ("scope", "key", "value")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.StateScope
    key: str
    value: _struct_pb2.Value
    def __init__(self, scope: _Optional[_Union[_common_pb2.StateScope, str]] = ..., key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ActionRequested(_message.Message):
    __slots__ = ("action", "target", "payload", "idempotency_key", "approval_hint")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_HINT_FIELD_NUMBER: _ClassVar[int]
    action: str
    target: _struct_pb2.Struct
    payload: _struct_pb2.Struct
    idempotency_key: str
    approval_hint: str
    def __init__(self, action: _Optional[str] = ..., target: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., approval_hint: _Optional[str] = ...) -> None: ...

class RunCompleted(_message.Message):
    __slots__ = ("finish_reason", "message")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    message: _common_pb2.AssistantMessage
    def __init__(self, finish_reason: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.AssistantMessage, _Mapping]] = ...) -> None: ...

class RunFailed(_message.Message):
    __slots__ = ("code", "message", "retryable", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    details: _struct_pb2.Struct
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RunLog(_message.Message):
    __slots__ = ("level", "text", "fields")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    level: RunLogLevel
    text: str
    fields: _struct_pb2.Struct
    def __init__(self, level: _Optional[_Union[RunLogLevel, str]] = ..., text: _Optional[str] = ..., fields: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class InteractionRequested(_message.Message):
    __slots__ = ("interaction",)
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    interaction: _common_pb2.InteractionRequest
    def __init__(self, interaction: _Optional[_Union[_common_pb2.InteractionRequest, _Mapping]] = ...) -> None: ...
