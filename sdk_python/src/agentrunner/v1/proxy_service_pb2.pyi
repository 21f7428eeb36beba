import datetime

from agentrunner.v1 import common_pb2 as _common_pb2
from agentrunner.v1 import context_pb2 as _context_pb2
from agentrunner.v1 import host_service_pb2 as _host_service_pb2
from agentrunner.v1 import result_pb2 as _result_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PageDirection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAGE_DIRECTION_UNSPECIFIED: _ClassVar[PageDirection]
    PAGE_DIRECTION_BACKWARD: _ClassVar[PageDirection]
    PAGE_DIRECTION_FORWARD: _ClassVar[PageDirection]

class StorageAreaName(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORAGE_AREA_NAME_UNSPECIFIED: _ClassVar[StorageAreaName]
    STORAGE_AREA_NAME_PLUGIN: _ClassVar[StorageAreaName]
    STORAGE_AREA_NAME_WORKSPACE: _ClassVar[StorageAreaName]
    STORAGE_AREA_NAME_BINDING: _ClassVar[StorageAreaName]
PAGE_DIRECTION_UNSPECIFIED: PageDirection
PAGE_DIRECTION_BACKWARD: PageDirection
PAGE_DIRECTION_FORWARD: PageDirection
STORAGE_AREA_NAME_UNSPECIFIED: StorageAreaName
STORAGE_AREA_NAME_PLUGIN: StorageAreaName
STORAGE_AREA_NAME_WORKSPACE: StorageAreaName
STORAGE_AREA_NAME_BINDING: StorageAreaName

class InvokeModelRequest(_message.Message):
    __slots__ = ("model_id", "messages", "tools", "extra_args", "remove_think")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_THINK_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelMessage]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    extra_args: _struct_pb2.Struct
    remove_think: bool
    def __init__(self, model_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ModelMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ..., extra_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., remove_think: _Optional[bool] = ...) -> None: ...

class InvokeModelResponse(_message.Message):
    __slots__ = ("message", "usage", "finish_reason")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.ModelMessage
    usage: _common_pb2.Usage
    finish_reason: str
    def __init__(self, message: _Optional[_Union[_common_pb2.ModelMessage, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class StreamModelRequest(_message.Message):
    __slots__ = ("model_id", "messages", "tools", "extra_args", "remove_think")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_THINK_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelMessage]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    extra_args: _struct_pb2.Struct
    remove_think: bool
    def __init__(self, model_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ModelMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ..., extra_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., remove_think: _Optional[bool] = ...) -> None: ...

class StreamModelResponse(_message.Message):
    __slots__ = ("chunk", "usage")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    chunk: ModelChunk
    usage: _common_pb2.Usage
    def __init__(self, chunk: _Optional[_Union[ModelChunk, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ModelChunk(_message.Message):
    __slots__ = ("content", "tool_calls", "finish_reason")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolCall]
    finish_reason: str
    def __init__(self, content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_common_pb2.ToolCall, _Mapping]]] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class RerankDocumentsRequest(_message.Message):
    __slots__ = ("model_id", "query", "documents", "top_k", "extra_args")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    extra_args: _struct_pb2.Struct
    def __init__(self, model_id: _Optional[str] = ..., query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., extra_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RerankDocumentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    def __init__(self, results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("index", "relevance_score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    relevance_score: float
    def __init__(self, index: _Optional[int] = ..., relevance_score: _Optional[float] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("model_id", "messages", "tools")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelMessage]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    def __init__(self, model_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ModelMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("tokens", "exact", "method")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    exact: bool
    method: str
    def __init__(self, tokens: _Optional[int] = ..., exact: _Optional[bool] = ..., method: _Optional[str] = ...) -> None: ...

class GetToolDetailRequest(_message.Message):
    __slots__ = ("tool_name",)
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    def __init__(self, tool_name: _Optional[str] = ...) -> None: ...

class GetToolDetailResponse(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolDefinition
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolDefinition, _Mapping]] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("tool_name", "parameters", "tool_call_id")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    parameters: _struct_pb2.Struct
    tool_call_id: str
    def __init__(self, tool_name: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("contents", "structured", "is_error", "truncated", "artifact")
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    structured: _struct_pb2.Struct
    is_error: bool
    truncated: bool
    artifact: _common_pb2.ArtifactRef
    def __init__(self, contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., structured: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., is_error: _Optional[bool] = ..., truncated: _Optional[bool] = ..., artifact: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ...) -> None: ...

class ListKnowledgeBasesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListKnowledgeBasesResponse(_message.Message):
    __slots__ = ("knowledge_bases",)
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[_context_pb2.KnowledgeBaseResource]
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[_context_pb2.KnowledgeBaseResource, _Mapping]]] = ...) -> None: ...

class RetrieveKnowledgeRequest(_message.Message):
    __slots__ = ("kb_id", "query_text", "top_k", "filters")
    KB_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_TEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    kb_id: str
    query_text: str
    top_k: int
    filters: _struct_pb2.Struct
    def __init__(self, kb_id: _Optional[str] = ..., query_text: _Optional[str] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RetrieveKnowledgeResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[KnowledgeChunk]
    def __init__(self, results: _Optional[_Iterable[_Union[KnowledgeChunk, _Mapping]]] = ...) -> None: ...

class KnowledgeChunk(_message.Message):
    __slots__ = ("document_id", "chunk_id", "content", "score", "metadata")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    chunk_id: str
    content: str
    score: float
    metadata: _struct_pb2.Struct
    def __init__(self, document_id: _Optional[str] = ..., chunk_id: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetPromptRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPromptResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...

class ListHistoryRequest(_message.Message):
    __slots__ = ("conversation_id", "before_cursor", "after_cursor", "limit", "direction", "include_artifacts")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_CURSOR_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    before_cursor: str
    after_cursor: str
    limit: int
    direction: PageDirection
    include_artifacts: bool
    def __init__(self, conversation_id: _Optional[str] = ..., before_cursor: _Optional[str] = ..., after_cursor: _Optional[str] = ..., limit: _Optional[int] = ..., direction: _Optional[_Union[PageDirection, str]] = ..., include_artifacts: _Optional[bool] = ...) -> None: ...

class ListHistoryResponse(_message.Message):
    __slots__ = ("items", "next_cursor", "prev_cursor", "has_more", "total_count")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    PREV_CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[TranscriptItem]
    next_cursor: str
    prev_cursor: str
    has_more: bool
    total_count: int
    def __init__(self, items: _Optional[_Iterable[_Union[TranscriptItem, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., prev_cursor: _Optional[str] = ..., has_more: _Optional[bool] = ..., total_count: _Optional[int] = ...) -> None: ...

class TranscriptItem(_message.Message):
    __slots__ = ("transcript_id", "event_id", "run_id", "conversation_id", "thread_id", "role", "item_type", "content", "contents", "artifacts", "seq", "cursor", "create_time", "metadata")
    TRANSCRIPT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ITEM_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    transcript_id: str
    event_id: str
    run_id: str
    conversation_id: str
    thread_id: str
    role: str
    item_type: str
    content: str
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    artifacts: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArtifactRef]
    seq: int
    cursor: str
    create_time: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    def __init__(self, transcript_id: _Optional[str] = ..., event_id: _Optional[str] = ..., run_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., role: _Optional[str] = ..., item_type: _Optional[str] = ..., content: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[_common_pb2.ArtifactRef, _Mapping]]] = ..., seq: _Optional[int] = ..., cursor: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SearchHistoryRequest(_message.Message):
    __slots__ = ("query", "conversation_id", "roles", "top_k")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    query: str
    conversation_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    def __init__(self, query: _Optional[str] = ..., conversation_id: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ...) -> None: ...

class SearchHistoryResponse(_message.Message):
    __slots__ = ("items", "query")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[TranscriptItem]
    query: str
    def __init__(self, items: _Optional[_Iterable[_Union[TranscriptItem, _Mapping]]] = ..., query: _Optional[str] = ...) -> None: ...

class GetEventRequest(_message.Message):
    __slots__ = ("event_id",)
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    def __init__(self, event_id: _Optional[str] = ...) -> None: ...

class GetEventResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: EventRecord
    def __init__(self, event: _Optional[_Union[EventRecord, _Mapping]] = ...) -> None: ...

class EventRecord(_message.Message):
    __slots__ = ("event_id", "event_type", "event_time", "source", "conversation_id", "thread_id", "actor", "subject", "input_summary", "data", "seq", "cursor", "bot_id", "workspace_id")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    INPUT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    event_type: str
    event_time: _timestamp_pb2.Timestamp
    source: str
    conversation_id: str
    thread_id: str
    actor: _context_pb2.ActorContext
    subject: _context_pb2.SubjectContext
    input_summary: str
    data: _struct_pb2.Struct
    seq: int
    cursor: str
    bot_id: str
    workspace_id: str
    def __init__(self, event_id: _Optional[str] = ..., event_type: _Optional[str] = ..., event_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[str] = ..., conversation_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., actor: _Optional[_Union[_context_pb2.ActorContext, _Mapping]] = ..., subject: _Optional[_Union[_context_pb2.SubjectContext, _Mapping]] = ..., input_summary: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., seq: _Optional[int] = ..., cursor: _Optional[str] = ..., bot_id: _Optional[str] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("conversation_id", "event_types", "before_cursor", "limit")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    BEFORE_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    before_cursor: str
    limit: int
    def __init__(self, conversation_id: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ..., before_cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("items", "next_cursor", "has_more")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[EventRecord]
    next_cursor: str
    has_more: bool
    def __init__(self, items: _Optional[_Iterable[_Union[EventRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., has_more: _Optional[bool] = ...) -> None: ...

class GetArtifactMetadataRequest(_message.Message):
    __slots__ = ("artifact_id",)
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    def __init__(self, artifact_id: _Optional[str] = ...) -> None: ...

class GetArtifactMetadataResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: ArtifactMetadata
    def __init__(self, artifact: _Optional[_Union[ArtifactMetadata, _Mapping]] = ...) -> None: ...

class ArtifactMetadata(_message.Message):
    __slots__ = ("ref", "source", "conversation_id", "run_id", "create_time")
    REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ref: _common_pb2.ArtifactRef
    source: str
    conversation_id: str
    run_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, ref: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ..., source: _Optional[str] = ..., conversation_id: _Optional[str] = ..., run_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReadArtifactRequest(_message.Message):
    __slots__ = ("artifact_id", "offset", "length")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    offset: int
    length: int
    def __init__(self, artifact_id: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadArtifactResponse(_message.Message):
    __slots__ = ("data", "offset", "size_bytes", "has_more")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    size_bytes: int
    has_more: bool
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., size_bytes: _Optional[int] = ..., has_more: _Optional[bool] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("artifact_id",)
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    def __init__(self, artifact_id: _Optional[str] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("data", "offset")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("scope", "key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.StateScope
    key: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.StateScope, str]] = ..., key: _Optional[str] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: _struct_pb2.Value
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class SetStateRequest(_message.Message):
    __slots__ = ("scope", "key", "value")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.StateScope
    key: str
    value: _struct_pb2.Value
    def __init__(self, scope: _Optional[_Union[_common_pb2.StateScope, str]] = ..., key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class SetStateResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteStateRequest(_message.Message):
    __slots__ = ("scope", "key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.StateScope
    key: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.StateScope, str]] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteStateResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListStateRequest(_message.Message):
    __slots__ = ("scope", "prefix", "limit")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.StateScope
    prefix: str
    limit: int
    def __init__(self, scope: _Optional[_Union[_common_pb2.StateScope, str]] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListStateResponse(_message.Message):
    __slots__ = ("keys", "has_more")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    has_more: bool
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class GetStorageRequest(_message.Message):
    __slots__ = ("area", "key")
    AREA_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    area: StorageAreaName
    key: str
    def __init__(self, area: _Optional[_Union[StorageAreaName, str]] = ..., key: _Optional[str] = ...) -> None: ...

class GetStorageResponse(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class SetStorageRequest(_message.Message):
    __slots__ = ("area", "key", "value")
    AREA_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    area: StorageAreaName
    key: str
    value: bytes
    def __init__(self, area: _Optional[_Union[StorageAreaName, str]] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class SetStorageResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteStorageRequest(_message.Message):
    __slots__ = ("area", "key")
    AREA_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    area: StorageAreaName
    key: str
    def __init__(self, area: _Optional[_Union[StorageAreaName, str]] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteStorageResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListStorageRequest(_message.Message):
    __slots__ = ("area", "prefix", "limit")
    AREA_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    area: StorageAreaName
    prefix: str
    limit: int
    def __init__(self, area: _Optional[_Union[StorageAreaName, str]] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListStorageResponse(_message.Message):
    __slots__ = ("keys", "has_more")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    has_more: bool
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class PullSteeringRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class PullSteeringResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SteeringInput]
    def __init__(self, items: _Optional[_Iterable[_Union[SteeringInput, _Mapping]]] = ...) -> None: ...

class SteeringInput(_message.Message):
    __slots__ = ("steering_id", "event", "input", "actor", "receive_time")
    STEERING_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    steering_id: str
    event: _context_pb2.EventContext
    input: _context_pb2.RunInput
    actor: _context_pb2.ActorContext
    receive_time: _timestamp_pb2.Timestamp
    def __init__(self, steering_id: _Optional[str] = ..., event: _Optional[_Union[_context_pb2.EventContext, _Mapping]] = ..., input: _Optional[_Union[_context_pb2.RunInput, _Mapping]] = ..., actor: _Optional[_Union[_context_pb2.ActorContext, _Mapping]] = ..., receive_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RequestPlatformActionRequest(_message.Message):
    __slots__ = ("action", "target", "payload", "idempotency_key", "bot_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    action: str
    target: _struct_pb2.Struct
    payload: _struct_pb2.Struct
    idempotency_key: str
    bot_id: str
    def __init__(self, action: _Optional[str] = ..., target: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., bot_id: _Optional[str] = ...) -> None: ...

class RequestPlatformActionResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _struct_pb2.Struct
    def __init__(self, result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SendReplyRequest(_message.Message):
    __slots__ = ("reply_id", "mode", "message", "quote_origin")
    REPLY_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUOTE_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    reply_id: str
    mode: _common_pb2.ReplyMode
    message: _common_pb2.AssistantMessage
    quote_origin: bool
    def __init__(self, reply_id: _Optional[str] = ..., mode: _Optional[_Union[_common_pb2.ReplyMode, str]] = ..., message: _Optional[_Union[_common_pb2.AssistantMessage, _Mapping]] = ..., quote_origin: _Optional[bool] = ...) -> None: ...

class SendReplyResponse(_message.Message):
    __slots__ = ("reply_id", "delivered", "platform_message_id")
    REPLY_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    reply_id: str
    delivered: bool
    platform_message_id: str
    def __init__(self, reply_id: _Optional[str] = ..., delivered: _Optional[bool] = ..., platform_message_id: _Optional[str] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("bot_id", "target_type", "target_id", "message", "idempotency_key")
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_TYPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    bot_id: str
    target_type: str
    target_id: str
    message: _common_pb2.AssistantMessage
    idempotency_key: str
    def __init__(self, bot_id: _Optional[str] = ..., target_type: _Optional[str] = ..., target_id: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.AssistantMessage, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("delivered", "platform_message_id")
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    delivered: bool
    platform_message_id: str
    def __init__(self, delivered: _Optional[bool] = ..., platform_message_id: _Optional[str] = ...) -> None: ...

class GetRunRecordRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunRecordResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _host_service_pb2.Run
    def __init__(self, run: _Optional[_Union[_host_service_pb2.Run, _Mapping]] = ...) -> None: ...

class ListRunRecordsRequest(_message.Message):
    __slots__ = ("conversation_id", "statuses", "before_cursor", "limit")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    BEFORE_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.RunStatus]
    before_cursor: str
    limit: int
    def __init__(self, conversation_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.RunStatus, str]]] = ..., before_cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRunRecordsResponse(_message.Message):
    __slots__ = ("runs", "next_cursor", "has_more")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_host_service_pb2.Run]
    next_cursor: str
    has_more: bool
    def __init__(self, runs: _Optional[_Iterable[_Union[_host_service_pb2.Run, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., has_more: _Optional[bool] = ...) -> None: ...

class ListRunRecordEventsRequest(_message.Message):
    __slots__ = ("run_id", "after_sequence", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_sequence: int
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRunRecordEventsResponse(_message.Message):
    __slots__ = ("results", "has_more")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_result_pb2.RunResult]
    has_more: bool
    def __init__(self, results: _Optional[_Iterable[_Union[_result_pb2.RunResult, _Mapping]]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class CancelRunRecordRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunRecordResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _host_service_pb2.Run
    def __init__(self, run: _Optional[_Union[_host_service_pb2.Run, _Mapping]] = ...) -> None: ...

class AppendRunResultRequest(_message.Message):
    __slots__ = ("run_id", "result")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    result: _result_pb2.RunResult
    def __init__(self, run_id: _Optional[str] = ..., result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ...) -> None: ...

class AppendRunResultResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _result_pb2.RunResult
    def __init__(self, result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ...) -> None: ...

class FinalizeRunRecordRequest(_message.Message):
    __slots__ = ("run_id", "status", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: _common_pb2.RunStatus
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class FinalizeRunRecordResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _host_service_pb2.Run
    def __init__(self, run: _Optional[_Union[_host_service_pb2.Run, _Mapping]] = ...) -> None: ...

class ControlRequest(_message.Message):
    __slots__ = ("hello", "ack", "heartbeat")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    hello: ControlHello
    ack: ControlAck
    heartbeat: ControlHeartbeat
    def __init__(self, hello: _Optional[_Union[ControlHello, _Mapping]] = ..., ack: _Optional[_Union[ControlAck, _Mapping]] = ..., heartbeat: _Optional[_Union[ControlHeartbeat, _Mapping]] = ...) -> None: ...

class ControlHello(_message.Message):
    __slots__ = ("run_id", "run_token", "accepts")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    run_token: str
    accepts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., run_token: _Optional[str] = ..., accepts: _Optional[_Iterable[str]] = ...) -> None: ...

class ControlAck(_message.Message):
    __slots__ = ("signal_id", "accepted", "detail")
    SIGNAL_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    signal_id: str
    accepted: bool
    detail: str
    def __init__(self, signal_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class ControlHeartbeat(_message.Message):
    __slots__ = ("last_sequence",)
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    last_sequence: int
    def __init__(self, last_sequence: _Optional[int] = ...) -> None: ...

class ControlResponse(_message.Message):
    __slots__ = ("signal_id", "welcome", "cancel", "steering", "deadline")
    SIGNAL_ID_FIELD_NUMBER: _ClassVar[int]
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    signal_id: str
    welcome: ControlWelcome
    cancel: CancelSignal
    steering: SteeringInput
    deadline: DeadlineSignal
    def __init__(self, signal_id: _Optional[str] = ..., welcome: _Optional[_Union[ControlWelcome, _Mapping]] = ..., cancel: _Optional[_Union[CancelSignal, _Mapping]] = ..., steering: _Optional[_Union[SteeringInput, _Mapping]] = ..., deadline: _Optional[_Union[DeadlineSignal, _Mapping]] = ...) -> None: ...

class ControlWelcome(_message.Message):
    __slots__ = ("deadline_at", "heartbeat_interval")
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    deadline_at: _timestamp_pb2.Timestamp
    heartbeat_interval: _duration_pb2.Duration
    def __init__(self, deadline_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CancelSignal(_message.Message):
    __slots__ = ("reason", "grace_period")
    REASON_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    reason: str
    grace_period: _duration_pb2.Duration
    def __init__(self, reason: _Optional[str] = ..., grace_period: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeadlineSignal(_message.Message):
    __slots__ = ("deadline_at",)
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    deadline_at: _timestamp_pb2.Timestamp
    def __init__(self, deadline_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
