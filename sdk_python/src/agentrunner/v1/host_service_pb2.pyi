import datetime

from agentrunner.v1 import common_pb2 as _common_pb2
from agentrunner.v1 import context_pb2 as _context_pb2
from agentrunner.v1 import manifest_pb2 as _manifest_pb2
from agentrunner.v1 import result_pb2 as _result_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InteractionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERACTION_STATUS_UNSPECIFIED: _ClassVar[InteractionStatus]
    INTERACTION_STATUS_PENDING: _ClassVar[InteractionStatus]
    INTERACTION_STATUS_SUBMITTED: _ClassVar[InteractionStatus]
    INTERACTION_STATUS_EXPIRED: _ClassVar[InteractionStatus]
    INTERACTION_STATUS_CANCELLED: _ClassVar[InteractionStatus]
INTERACTION_STATUS_UNSPECIFIED: InteractionStatus
INTERACTION_STATUS_PENDING: InteractionStatus
INTERACTION_STATUS_SUBMITTED: InteractionStatus
INTERACTION_STATUS_EXPIRED: InteractionStatus
INTERACTION_STATUS_CANCELLED: InteractionStatus

class EventEnvelope(_message.Message):
    __slots__ = ("event_id", "event_type", "source", "source_event_type", "event_time", "trigger_source", "bot_id", "workspace_id", "conversation", "actor", "subject", "input", "delivery", "data", "adapter_extra", "metadata", "variables", "platform_event")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_EXTRA_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_EVENT_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    event_type: str
    source: str
    source_event_type: str
    event_time: _timestamp_pb2.Timestamp
    trigger_source: _context_pb2.TriggerSource
    bot_id: str
    workspace_id: str
    conversation: _context_pb2.ConversationContext
    actor: _context_pb2.ActorContext
    subject: _context_pb2.SubjectContext
    input: EventInput
    delivery: _context_pb2.DeliveryContext
    data: _struct_pb2.Struct
    adapter_extra: _struct_pb2.Struct
    metadata: _struct_pb2.Struct
    variables: _struct_pb2.Struct
    platform_event: _context_pb2.PlatformEvent
    def __init__(self, event_id: _Optional[str] = ..., event_type: _Optional[str] = ..., source: _Optional[str] = ..., source_event_type: _Optional[str] = ..., event_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trigger_source: _Optional[_Union[_context_pb2.TriggerSource, str]] = ..., bot_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., conversation: _Optional[_Union[_context_pb2.ConversationContext, _Mapping]] = ..., actor: _Optional[_Union[_context_pb2.ActorContext, _Mapping]] = ..., subject: _Optional[_Union[_context_pb2.SubjectContext, _Mapping]] = ..., input: _Optional[_Union[EventInput, _Mapping]] = ..., delivery: _Optional[_Union[_context_pb2.DeliveryContext, _Mapping]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., adapter_extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., platform_event: _Optional[_Union[_context_pb2.PlatformEvent, _Mapping]] = ...) -> None: ...

class EventInput(_message.Message):
    __slots__ = ("text", "contents", "attachments")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    attachments: _containers.RepeatedCompositeFieldContainer[InputAttachment]
    def __init__(self, text: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., attachments: _Optional[_Iterable[_Union[InputAttachment, _Mapping]]] = ...) -> None: ...

class InputAttachment(_message.Message):
    __slots__ = ("name", "mime_type", "content", "data_url", "uri")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DATA_URL_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    name: str
    mime_type: str
    content: bytes
    data_url: str
    uri: str
    def __init__(self, name: _Optional[str] = ..., mime_type: _Optional[str] = ..., content: _Optional[bytes] = ..., data_url: _Optional[str] = ..., uri: _Optional[str] = ...) -> None: ...

class HostServiceRunRequest(_message.Message):
    __slots__ = ("event", "agent_id")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    event: EventEnvelope
    agent_id: str
    def __init__(self, event: _Optional[_Union[EventEnvelope, _Mapping]] = ..., agent_id: _Optional[str] = ...) -> None: ...

class HostServiceRunResponse(_message.Message):
    __slots__ = ("accepted", "result", "finished", "reply", "interaction")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    accepted: RunAccepted
    result: _result_pb2.RunResult
    finished: RunFinished
    reply: Reply
    interaction: Interaction
    def __init__(self, accepted: _Optional[_Union[RunAccepted, _Mapping]] = ..., result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ..., finished: _Optional[_Union[RunFinished, _Mapping]] = ..., reply: _Optional[_Union[Reply, _Mapping]] = ..., interaction: _Optional[_Union[Interaction, _Mapping]] = ...) -> None: ...

class RunAccepted(_message.Message):
    __slots__ = ("run_id", "runner_id", "binding_id", "agent_id", "attached", "trace_id", "event_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    runner_id: str
    binding_id: str
    agent_id: str
    attached: bool
    trace_id: str
    event_id: str
    def __init__(self, run_id: _Optional[str] = ..., runner_id: _Optional[str] = ..., binding_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., attached: _Optional[bool] = ..., trace_id: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("run_id", "status", "reason", "usage")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: _common_pb2.RunStatus
    reason: str
    usage: _common_pb2.Usage
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., reason: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "event_id", "agent_id", "binding_id", "runner_id", "conversation_id", "thread_id", "status", "status_reason", "create_time", "start_time", "finish_time", "deadline_time", "cancel_request_time", "usage", "last_sequence", "trace_id", "bot_id", "workspace_id", "metadata")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUEST_TIME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    event_id: str
    agent_id: str
    binding_id: str
    runner_id: str
    conversation_id: str
    thread_id: str
    status: _common_pb2.RunStatus
    status_reason: str
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    deadline_time: _timestamp_pb2.Timestamp
    cancel_request_time: _timestamp_pb2.Timestamp
    usage: _common_pb2.Usage
    last_sequence: int
    trace_id: str
    bot_id: str
    workspace_id: str
    metadata: _struct_pb2.Struct
    def __init__(self, run_id: _Optional[str] = ..., event_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., binding_id: _Optional[str] = ..., runner_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., status_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_request_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., last_sequence: _Optional[int] = ..., trace_id: _Optional[str] = ..., bot_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AttachRunRequest(_message.Message):
    __slots__ = ("run_id", "after_sequence")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_sequence: int
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class AttachRunResponse(_message.Message):
    __slots__ = ("accepted", "result", "finished", "reply", "interaction")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    accepted: RunAccepted
    result: _result_pb2.RunResult
    finished: RunFinished
    reply: Reply
    interaction: Interaction
    def __init__(self, accepted: _Optional[_Union[RunAccepted, _Mapping]] = ..., result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ..., finished: _Optional[_Union[RunFinished, _Mapping]] = ..., reply: _Optional[_Union[Reply, _Mapping]] = ..., interaction: _Optional[_Union[Interaction, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class HostServiceListRunnersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HostServiceListRunnersResponse(_message.Message):
    __slots__ = ("runners",)
    RUNNERS_FIELD_NUMBER: _ClassVar[int]
    runners: _containers.RepeatedCompositeFieldContainer[RegisteredRunner]
    def __init__(self, runners: _Optional[_Iterable[_Union[RegisteredRunner, _Mapping]]] = ...) -> None: ...

class RegisteredRunner(_message.Message):
    __slots__ = ("manifest", "endpoint_id", "address", "available", "refresh_time")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REFRESH_TIME_FIELD_NUMBER: _ClassVar[int]
    manifest: _manifest_pb2.RunnerManifest
    endpoint_id: str
    address: str
    available: bool
    refresh_time: _timestamp_pb2.Timestamp
    def __init__(self, manifest: _Optional[_Union[_manifest_pb2.RunnerManifest, _Mapping]] = ..., endpoint_id: _Optional[str] = ..., address: _Optional[str] = ..., available: _Optional[bool] = ..., refresh_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("run_id", "reply_id", "mode", "message", "quote_origin", "create_time")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUOTE_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reply_id: str
    mode: _common_pb2.ReplyMode
    message: _common_pb2.AssistantMessage
    quote_origin: bool
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., reply_id: _Optional[str] = ..., mode: _Optional[_Union[_common_pb2.ReplyMode, str]] = ..., message: _Optional[_Union[_common_pb2.AssistantMessage, _Mapping]] = ..., quote_origin: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Interaction(_message.Message):
    __slots__ = ("request", "run_id", "conversation_id", "status", "create_time", "submit_time", "submitted_run_id")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    request: _common_pb2.InteractionRequest
    run_id: str
    conversation_id: str
    status: InteractionStatus
    create_time: _timestamp_pb2.Timestamp
    submit_time: _timestamp_pb2.Timestamp
    submitted_run_id: str
    def __init__(self, request: _Optional[_Union[_common_pb2.InteractionRequest, _Mapping]] = ..., run_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., status: _Optional[_Union[InteractionStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., submitted_run_id: _Optional[str] = ...) -> None: ...

class SubmitInteractionRequest(_message.Message):
    __slots__ = ("interaction_id", "action_id", "values", "actor", "delivery", "event_id", "metadata")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    action_id: str
    values: _struct_pb2.Struct
    actor: _context_pb2.ActorContext
    delivery: _context_pb2.DeliveryContext
    event_id: str
    metadata: _struct_pb2.Struct
    def __init__(self, interaction_id: _Optional[str] = ..., action_id: _Optional[str] = ..., values: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., actor: _Optional[_Union[_context_pb2.ActorContext, _Mapping]] = ..., delivery: _Optional[_Union[_context_pb2.DeliveryContext, _Mapping]] = ..., event_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SubmitInteractionResponse(_message.Message):
    __slots__ = ("accepted", "result", "finished", "reply", "interaction")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    accepted: RunAccepted
    result: _result_pb2.RunResult
    finished: RunFinished
    reply: Reply
    interaction: Interaction
    def __init__(self, accepted: _Optional[_Union[RunAccepted, _Mapping]] = ..., result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ..., finished: _Optional[_Union[RunFinished, _Mapping]] = ..., reply: _Optional[_Union[Reply, _Mapping]] = ..., interaction: _Optional[_Union[Interaction, _Mapping]] = ...) -> None: ...
