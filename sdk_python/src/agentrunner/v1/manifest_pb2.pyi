from agentrunner.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_OPERATION_UNSPECIFIED: _ClassVar[ModelOperation]
    MODEL_OPERATION_INVOKE: _ClassVar[ModelOperation]
    MODEL_OPERATION_STREAM: _ClassVar[ModelOperation]
    MODEL_OPERATION_RERANK: _ClassVar[ModelOperation]
    MODEL_OPERATION_COUNT_TOKENS: _ClassVar[ModelOperation]

class ToolOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_OPERATION_UNSPECIFIED: _ClassVar[ToolOperation]
    TOOL_OPERATION_DETAIL: _ClassVar[ToolOperation]
    TOOL_OPERATION_CALL: _ClassVar[ToolOperation]

class KnowledgeOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KNOWLEDGE_OPERATION_UNSPECIFIED: _ClassVar[KnowledgeOperation]
    KNOWLEDGE_OPERATION_LIST: _ClassVar[KnowledgeOperation]
    KNOWLEDGE_OPERATION_RETRIEVE: _ClassVar[KnowledgeOperation]

class HistoryOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HISTORY_OPERATION_UNSPECIFIED: _ClassVar[HistoryOperation]
    HISTORY_OPERATION_PAGE: _ClassVar[HistoryOperation]
    HISTORY_OPERATION_SEARCH: _ClassVar[HistoryOperation]

class EventOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_OPERATION_UNSPECIFIED: _ClassVar[EventOperation]
    EVENT_OPERATION_GET: _ClassVar[EventOperation]
    EVENT_OPERATION_PAGE: _ClassVar[EventOperation]

class ArtifactOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_OPERATION_UNSPECIFIED: _ClassVar[ArtifactOperation]
    ARTIFACT_OPERATION_METADATA: _ClassVar[ArtifactOperation]
    ARTIFACT_OPERATION_READ: _ClassVar[ArtifactOperation]

class StorageArea(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORAGE_AREA_UNSPECIFIED: _ClassVar[StorageArea]
    STORAGE_AREA_PLUGIN: _ClassVar[StorageArea]
    STORAGE_AREA_WORKSPACE: _ClassVar[StorageArea]
    STORAGE_AREA_BINDING: _ClassVar[StorageArea]

class FileKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_KIND_UNSPECIFIED: _ClassVar[FileKind]
    FILE_KIND_CONFIG: _ClassVar[FileKind]
    FILE_KIND_KNOWLEDGE: _ClassVar[FileKind]

class RunRecordOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_RECORD_OPERATION_UNSPECIFIED: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_GET: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_LIST: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_EVENTS_PAGE: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_CANCEL: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_APPEND_RESULT: _ClassVar[RunRecordOperation]
    RUN_RECORD_OPERATION_FINALIZE: _ClassVar[RunRecordOperation]

class ConfigFieldType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_FIELD_TYPE_UNSPECIFIED: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_STRING: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_TEXT: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_INTEGER: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_NUMBER: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_BOOLEAN: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_SELECT: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_JSON: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_SECRET: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_PROMPT_EDITOR: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR: _ClassVar[ConfigFieldType]
    CONFIG_FIELD_TYPE_STRING_LIST: _ClassVar[ConfigFieldType]
MODEL_OPERATION_UNSPECIFIED: ModelOperation
MODEL_OPERATION_INVOKE: ModelOperation
MODEL_OPERATION_STREAM: ModelOperation
MODEL_OPERATION_RERANK: ModelOperation
MODEL_OPERATION_COUNT_TOKENS: ModelOperation
TOOL_OPERATION_UNSPECIFIED: ToolOperation
TOOL_OPERATION_DETAIL: ToolOperation
TOOL_OPERATION_CALL: ToolOperation
KNOWLEDGE_OPERATION_UNSPECIFIED: KnowledgeOperation
KNOWLEDGE_OPERATION_LIST: KnowledgeOperation
KNOWLEDGE_OPERATION_RETRIEVE: KnowledgeOperation
HISTORY_OPERATION_UNSPECIFIED: HistoryOperation
HISTORY_OPERATION_PAGE: HistoryOperation
HISTORY_OPERATION_SEARCH: HistoryOperation
EVENT_OPERATION_UNSPECIFIED: EventOperation
EVENT_OPERATION_GET: EventOperation
EVENT_OPERATION_PAGE: EventOperation
ARTIFACT_OPERATION_UNSPECIFIED: ArtifactOperation
ARTIFACT_OPERATION_METADATA: ArtifactOperation
ARTIFACT_OPERATION_READ: ArtifactOperation
STORAGE_AREA_UNSPECIFIED: StorageArea
STORAGE_AREA_PLUGIN: StorageArea
STORAGE_AREA_WORKSPACE: StorageArea
STORAGE_AREA_BINDING: StorageArea
FILE_KIND_UNSPECIFIED: FileKind
FILE_KIND_CONFIG: FileKind
FILE_KIND_KNOWLEDGE: FileKind
RUN_RECORD_OPERATION_UNSPECIFIED: RunRecordOperation
RUN_RECORD_OPERATION_GET: RunRecordOperation
RUN_RECORD_OPERATION_LIST: RunRecordOperation
RUN_RECORD_OPERATION_EVENTS_PAGE: RunRecordOperation
RUN_RECORD_OPERATION_CANCEL: RunRecordOperation
RUN_RECORD_OPERATION_APPEND_RESULT: RunRecordOperation
RUN_RECORD_OPERATION_FINALIZE: RunRecordOperation
CONFIG_FIELD_TYPE_UNSPECIFIED: ConfigFieldType
CONFIG_FIELD_TYPE_STRING: ConfigFieldType
CONFIG_FIELD_TYPE_TEXT: ConfigFieldType
CONFIG_FIELD_TYPE_INTEGER: ConfigFieldType
CONFIG_FIELD_TYPE_NUMBER: ConfigFieldType
CONFIG_FIELD_TYPE_BOOLEAN: ConfigFieldType
CONFIG_FIELD_TYPE_SELECT: ConfigFieldType
CONFIG_FIELD_TYPE_JSON: ConfigFieldType
CONFIG_FIELD_TYPE_SECRET: ConfigFieldType
CONFIG_FIELD_TYPE_PROMPT_EDITOR: ConfigFieldType
CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR: ConfigFieldType
CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR: ConfigFieldType
CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR: ConfigFieldType
CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR: ConfigFieldType
CONFIG_FIELD_TYPE_STRING_LIST: ConfigFieldType

class RunnerManifest(_message.Message):
    __slots__ = ("id", "name", "label", "description", "protocol_version", "capabilities", "permissions", "context_policy", "config_schema", "metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_POLICY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    label: _common_pb2.I18nText
    description: _common_pb2.I18nText
    protocol_version: str
    capabilities: RunnerCapabilities
    permissions: RunnerPermissions
    context_policy: ContextPolicy
    config_schema: _containers.RepeatedCompositeFieldContainer[ConfigField]
    metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., label: _Optional[_Union[_common_pb2.I18nText, _Mapping]] = ..., description: _Optional[_Union[_common_pb2.I18nText, _Mapping]] = ..., protocol_version: _Optional[str] = ..., capabilities: _Optional[_Union[RunnerCapabilities, _Mapping]] = ..., permissions: _Optional[_Union[RunnerPermissions, _Mapping]] = ..., context_policy: _Optional[_Union[ContextPolicy, _Mapping]] = ..., config_schema: _Optional[_Iterable[_Union[ConfigField, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RunnerCapabilities(_message.Message):
    __slots__ = ("streaming", "tool_calling", "knowledge_retrieval", "multimodal_input", "skill_authoring", "skill_injection", "event_context", "platform_api", "interrupt", "stateful_session", "self_managed_context", "steering", "interactions")
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLING_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_RETRIEVAL_FIELD_NUMBER: _ClassVar[int]
    MULTIMODAL_INPUT_FIELD_NUMBER: _ClassVar[int]
    SKILL_AUTHORING_FIELD_NUMBER: _ClassVar[int]
    SKILL_INJECTION_FIELD_NUMBER: _ClassVar[int]
    EVENT_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_API_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_SESSION_FIELD_NUMBER: _ClassVar[int]
    SELF_MANAGED_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    INTERACTIONS_FIELD_NUMBER: _ClassVar[int]
    streaming: bool
    tool_calling: bool
    knowledge_retrieval: bool
    multimodal_input: bool
    skill_authoring: bool
    skill_injection: bool
    event_context: bool
    platform_api: bool
    interrupt: bool
    stateful_session: bool
    self_managed_context: bool
    steering: bool
    interactions: bool
    def __init__(self, streaming: _Optional[bool] = ..., tool_calling: _Optional[bool] = ..., knowledge_retrieval: _Optional[bool] = ..., multimodal_input: _Optional[bool] = ..., skill_authoring: _Optional[bool] = ..., skill_injection: _Optional[bool] = ..., event_context: _Optional[bool] = ..., platform_api: _Optional[bool] = ..., interrupt: _Optional[bool] = ..., stateful_session: _Optional[bool] = ..., self_managed_context: _Optional[bool] = ..., steering: _Optional[bool] = ..., interactions: _Optional[bool] = ...) -> None: ...

class RunnerPermissions(_message.Message):
    __slots__ = ("models", "tools", "knowledge_bases", "history", "events", "artifacts", "storage", "files", "platform_api", "state", "runs", "prompt")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_API_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[ModelOperation]
    tools: _containers.RepeatedScalarFieldContainer[ToolOperation]
    knowledge_bases: _containers.RepeatedScalarFieldContainer[KnowledgeOperation]
    history: _containers.RepeatedScalarFieldContainer[HistoryOperation]
    events: _containers.RepeatedScalarFieldContainer[EventOperation]
    artifacts: _containers.RepeatedScalarFieldContainer[ArtifactOperation]
    storage: _containers.RepeatedScalarFieldContainer[StorageArea]
    files: _containers.RepeatedScalarFieldContainer[FileKind]
    platform_api: _containers.RepeatedScalarFieldContainer[str]
    state: _containers.RepeatedScalarFieldContainer[_common_pb2.StateScope]
    runs: _containers.RepeatedScalarFieldContainer[RunRecordOperation]
    prompt: bool
    def __init__(self, models: _Optional[_Iterable[_Union[ModelOperation, str]]] = ..., tools: _Optional[_Iterable[_Union[ToolOperation, str]]] = ..., knowledge_bases: _Optional[_Iterable[_Union[KnowledgeOperation, str]]] = ..., history: _Optional[_Iterable[_Union[HistoryOperation, str]]] = ..., events: _Optional[_Iterable[_Union[EventOperation, str]]] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactOperation, str]]] = ..., storage: _Optional[_Iterable[_Union[StorageArea, str]]] = ..., files: _Optional[_Iterable[_Union[FileKind, str]]] = ..., platform_api: _Optional[_Iterable[str]] = ..., state: _Optional[_Iterable[_Union[_common_pb2.StateScope, str]]] = ..., runs: _Optional[_Iterable[_Union[RunRecordOperation, str]]] = ..., prompt: _Optional[bool] = ...) -> None: ...

class ContextPolicy(_message.Message):
    __slots__ = ("supports_history_pull", "supports_history_search", "supports_artifact_pull", "owns_compaction", "wants_static_context_refs")
    SUPPORTS_HISTORY_PULL_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_HISTORY_SEARCH_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_ARTIFACT_PULL_FIELD_NUMBER: _ClassVar[int]
    OWNS_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    WANTS_STATIC_CONTEXT_REFS_FIELD_NUMBER: _ClassVar[int]
    supports_history_pull: bool
    supports_history_search: bool
    supports_artifact_pull: bool
    owns_compaction: bool
    wants_static_context_refs: bool
    def __init__(self, supports_history_pull: _Optional[bool] = ..., supports_history_search: _Optional[bool] = ..., supports_artifact_pull: _Optional[bool] = ..., owns_compaction: _Optional[bool] = ..., wants_static_context_refs: _Optional[bool] = ...) -> None: ...

class ConfigField(_message.Message):
    __slots__ = ("name", "type", "label", "description", "required", "default_value", "options", "show_if")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SHOW_IF_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: ConfigFieldType
    label: _common_pb2.I18nText
    description: _common_pb2.I18nText
    required: bool
    default_value: _struct_pb2.Value
    options: _containers.RepeatedCompositeFieldContainer[ConfigOption]
    show_if: ShowIf
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[ConfigFieldType, str]] = ..., label: _Optional[_Union[_common_pb2.I18nText, _Mapping]] = ..., description: _Optional[_Union[_common_pb2.I18nText, _Mapping]] = ..., required: _Optional[bool] = ..., default_value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., options: _Optional[_Iterable[_Union[ConfigOption, _Mapping]]] = ..., show_if: _Optional[_Union[ShowIf, _Mapping]] = ...) -> None: ...

class ConfigOption(_message.Message):
    __slots__ = ("name", "label")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    label: _common_pb2.I18nText
    def __init__(self, name: _Optional[str] = ..., label: _Optional[_Union[_common_pb2.I18nText, _Mapping]] = ...) -> None: ...

class ShowIf(_message.Message):
    __slots__ = ("field", "operator", "value")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    field: str
    operator: str
    value: _struct_pb2.Value
    def __init__(self, field: _Optional[str] = ..., operator: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
