import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_KIND_UNSPECIFIED: _ClassVar[MessageKind]
    MESSAGE_KIND_ANSWER: _ClassVar[MessageKind]
    MESSAGE_KIND_REASONING: _ClassVar[MessageKind]
    MESSAGE_KIND_PROGRESS: _ClassVar[MessageKind]

class StateScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_SCOPE_UNSPECIFIED: _ClassVar[StateScope]
    STATE_SCOPE_CONVERSATION: _ClassVar[StateScope]
    STATE_SCOPE_ACTOR: _ClassVar[StateScope]
    STATE_SCOPE_SUBJECT: _ClassVar[StateScope]
    STATE_SCOPE_RUNNER: _ClassVar[StateScope]
    STATE_SCOPE_BINDING: _ClassVar[StateScope]
    STATE_SCOPE_WORKSPACE: _ClassVar[StateScope]

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_CREATED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
    RUN_STATUS_TIMEOUT: _ClassVar[RunStatus]
    RUN_STATUS_INTERRUPTED: _ClassVar[RunStatus]
    RUN_STATUS_DISCARDED: _ClassVar[RunStatus]

class ReplyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLY_MODE_UNSPECIFIED: _ClassVar[ReplyMode]
    REPLY_MODE_FULL: _ClassVar[ReplyMode]
    REPLY_MODE_UPDATE: _ClassVar[ReplyMode]
    REPLY_MODE_FINISH: _ClassVar[ReplyMode]
    REPLY_MODE_ABORT: _ClassVar[ReplyMode]

class InteractionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERACTION_KIND_UNSPECIFIED: _ClassVar[InteractionKind]
    INTERACTION_KIND_FORM: _ClassVar[InteractionKind]
    INTERACTION_KIND_CONFIRMATION: _ClassVar[InteractionKind]
    INTERACTION_KIND_CHOICE: _ClassVar[InteractionKind]

class InteractionFieldType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERACTION_FIELD_TYPE_UNSPECIFIED: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_TEXT: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_TEXTAREA: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_SELECT: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_MULTISELECT: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_NUMBER: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_BOOLEAN: _ClassVar[InteractionFieldType]
    INTERACTION_FIELD_TYPE_FILE: _ClassVar[InteractionFieldType]

class InteractionActionStyle(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERACTION_ACTION_STYLE_UNSPECIFIED: _ClassVar[InteractionActionStyle]
    INTERACTION_ACTION_STYLE_DEFAULT: _ClassVar[InteractionActionStyle]
    INTERACTION_ACTION_STYLE_PRIMARY: _ClassVar[InteractionActionStyle]
    INTERACTION_ACTION_STYLE_DANGER: _ClassVar[InteractionActionStyle]
MESSAGE_KIND_UNSPECIFIED: MessageKind
MESSAGE_KIND_ANSWER: MessageKind
MESSAGE_KIND_REASONING: MessageKind
MESSAGE_KIND_PROGRESS: MessageKind
STATE_SCOPE_UNSPECIFIED: StateScope
STATE_SCOPE_CONVERSATION: StateScope
STATE_SCOPE_ACTOR: StateScope
STATE_SCOPE_SUBJECT: StateScope
STATE_SCOPE_RUNNER: StateScope
STATE_SCOPE_BINDING: StateScope
STATE_SCOPE_WORKSPACE: StateScope
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_CREATED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_TIMEOUT: RunStatus
RUN_STATUS_INTERRUPTED: RunStatus
RUN_STATUS_DISCARDED: RunStatus
REPLY_MODE_UNSPECIFIED: ReplyMode
REPLY_MODE_FULL: ReplyMode
REPLY_MODE_UPDATE: ReplyMode
REPLY_MODE_FINISH: ReplyMode
REPLY_MODE_ABORT: ReplyMode
INTERACTION_KIND_UNSPECIFIED: InteractionKind
INTERACTION_KIND_FORM: InteractionKind
INTERACTION_KIND_CONFIRMATION: InteractionKind
INTERACTION_KIND_CHOICE: InteractionKind
INTERACTION_FIELD_TYPE_UNSPECIFIED: InteractionFieldType
INTERACTION_FIELD_TYPE_TEXT: InteractionFieldType
INTERACTION_FIELD_TYPE_TEXTAREA: InteractionFieldType
INTERACTION_FIELD_TYPE_SELECT: InteractionFieldType
INTERACTION_FIELD_TYPE_MULTISELECT: InteractionFieldType
INTERACTION_FIELD_TYPE_NUMBER: InteractionFieldType
INTERACTION_FIELD_TYPE_BOOLEAN: InteractionFieldType
INTERACTION_FIELD_TYPE_FILE: InteractionFieldType
INTERACTION_ACTION_STYLE_UNSPECIFIED: InteractionActionStyle
INTERACTION_ACTION_STYLE_DEFAULT: InteractionActionStyle
INTERACTION_ACTION_STYLE_PRIMARY: InteractionActionStyle
INTERACTION_ACTION_STYLE_DANGER: InteractionActionStyle

class I18nText(_message.Message):
    __slots__ = ("translations",)
    class TranslationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRANSLATIONS_FIELD_NUMBER: _ClassVar[int]
    translations: _containers.ScalarMap[str, str]
    def __init__(self, translations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ContentElement(_message.Message):
    __slots__ = ("text", "image", "file", "artifact")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: ImageContent
    file: FileContent
    artifact: ArtifactRef
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[ImageContent, _Mapping]] = ..., file: _Optional[_Union[FileContent, _Mapping]] = ..., artifact: _Optional[_Union[ArtifactRef, _Mapping]] = ...) -> None: ...

class ImageContent(_message.Message):
    __slots__ = ("uri", "detail", "mime_type")
    URI_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    detail: str
    mime_type: str
    def __init__(self, uri: _Optional[str] = ..., detail: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class FileContent(_message.Message):
    __slots__ = ("uri", "name", "mime_type")
    URI_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    name: str
    mime_type: str
    def __init__(self, uri: _Optional[str] = ..., name: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("artifact_id", "mime_type", "size_bytes", "sha256", "name", "uri", "summary", "expires_at", "metadata")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    mime_type: str
    size_bytes: int
    sha256: str
    name: str
    uri: str
    summary: str
    expires_at: _timestamp_pb2.Timestamp
    metadata: _struct_pb2.Struct
    def __init__(self, artifact_id: _Optional[str] = ..., mime_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., name: _Optional[str] = ..., uri: _Optional[str] = ..., summary: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "extra")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    extra: _struct_pb2.Struct
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelMessage(_message.Message):
    __slots__ = ("role", "content", "contents", "tool_calls", "tool_call_id", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    contents: _containers.RepeatedCompositeFieldContainer[ContentElement]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[ContentElement, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AssistantMessage(_message.Message):
    __slots__ = ("content", "contents", "artifacts", "metadata", "message_id", "kind")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    content: str
    contents: _containers.RepeatedCompositeFieldContainer[ContentElement]
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactRef]
    metadata: _struct_pb2.Struct
    message_id: str
    kind: MessageKind
    def __init__(self, content: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[ContentElement, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactRef, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., message_id: _Optional[str] = ..., kind: _Optional[_Union[MessageKind, str]] = ...) -> None: ...

class InteractionRequest(_message.Message):
    __slots__ = ("interaction_id", "kind", "title", "description", "fields", "actions", "expires_at", "fallback_text", "metadata")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    kind: InteractionKind
    title: str
    description: str
    fields: _containers.RepeatedCompositeFieldContainer[InteractionField]
    actions: _containers.RepeatedCompositeFieldContainer[InteractionAction]
    expires_at: _timestamp_pb2.Timestamp
    fallback_text: str
    metadata: _struct_pb2.Struct
    def __init__(self, interaction_id: _Optional[str] = ..., kind: _Optional[_Union[InteractionKind, str]] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[InteractionField, _Mapping]]] = ..., actions: _Optional[_Iterable[_Union[InteractionAction, _Mapping]]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fallback_text: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class InteractionField(_message.Message):
    __slots__ = ("id", "label", "type", "required", "options", "placeholder", "default_value")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    id: str
    label: str
    type: InteractionFieldType
    required: bool
    options: _containers.RepeatedCompositeFieldContainer[InteractionOption]
    placeholder: str
    default_value: _struct_pb2.Value
    def __init__(self, id: _Optional[str] = ..., label: _Optional[str] = ..., type: _Optional[_Union[InteractionFieldType, str]] = ..., required: _Optional[bool] = ..., options: _Optional[_Iterable[_Union[InteractionOption, _Mapping]]] = ..., placeholder: _Optional[str] = ..., default_value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class InteractionOption(_message.Message):
    __slots__ = ("value", "label", "description")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    value: str
    label: str
    description: str
    def __init__(self, value: _Optional[str] = ..., label: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class InteractionAction(_message.Message):
    __slots__ = ("id", "label", "style")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    STYLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    label: str
    style: InteractionActionStyle
    def __init__(self, id: _Optional[str] = ..., label: _Optional[str] = ..., style: _Optional[_Union[InteractionActionStyle, str]] = ...) -> None: ...

class InteractionSubmission(_message.Message):
    __slots__ = ("interaction_id", "action_id", "values", "submitted_at", "request_run_id")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    action_id: str
    values: _struct_pb2.Struct
    submitted_at: _timestamp_pb2.Timestamp
    request_run_id: str
    def __init__(self, interaction_id: _Optional[str] = ..., action_id: _Optional[str] = ..., values: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_run_id: _Optional[str] = ...) -> None: ...

class InteractionCapabilities(_message.Message):
    __slots__ = ("field_types", "action_styles", "max_fields", "supports_updates")
    FIELD_TYPES_FIELD_NUMBER: _ClassVar[int]
    ACTION_STYLES_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELDS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_UPDATES_FIELD_NUMBER: _ClassVar[int]
    field_types: _containers.RepeatedScalarFieldContainer[InteractionFieldType]
    action_styles: _containers.RepeatedScalarFieldContainer[InteractionActionStyle]
    max_fields: int
    supports_updates: bool
    def __init__(self, field_types: _Optional[_Iterable[_Union[InteractionFieldType, str]]] = ..., action_styles: _Optional[_Iterable[_Union[InteractionActionStyle, str]]] = ..., max_fields: _Optional[int] = ..., supports_updates: _Optional[bool] = ...) -> None: ...
