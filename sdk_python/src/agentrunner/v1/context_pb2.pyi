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

class TriggerSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_SOURCE_UNSPECIFIED: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_PLATFORM: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_WEBUI: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_API: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_SCHEDULER: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_SYSTEM: _ClassVar[TriggerSource]
    TRIGGER_SOURCE_HOST_ADAPTER: _ClassVar[TriggerSource]

class ChatType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHAT_TYPE_UNSPECIFIED: _ClassVar[ChatType]
    CHAT_TYPE_PRIVATE: _ClassVar[ChatType]
    CHAT_TYPE_GROUP: _ClassVar[ChatType]

class InlineMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INLINE_MODE_UNSPECIFIED: _ClassVar[InlineMode]
    INLINE_MODE_NONE: _ClassVar[InlineMode]
    INLINE_MODE_CURRENT_EVENT: _ClassVar[InlineMode]
    INLINE_MODE_RECENT_TAIL: _ClassVar[InlineMode]
    INLINE_MODE_SUMMARY_TAIL: _ClassVar[InlineMode]
TRIGGER_SOURCE_UNSPECIFIED: TriggerSource
TRIGGER_SOURCE_PLATFORM: TriggerSource
TRIGGER_SOURCE_WEBUI: TriggerSource
TRIGGER_SOURCE_API: TriggerSource
TRIGGER_SOURCE_SCHEDULER: TriggerSource
TRIGGER_SOURCE_SYSTEM: TriggerSource
TRIGGER_SOURCE_HOST_ADAPTER: TriggerSource
CHAT_TYPE_UNSPECIFIED: ChatType
CHAT_TYPE_PRIVATE: ChatType
CHAT_TYPE_GROUP: ChatType
INLINE_MODE_UNSPECIFIED: InlineMode
INLINE_MODE_NONE: InlineMode
INLINE_MODE_CURRENT_EVENT: InlineMode
INLINE_MODE_RECENT_TAIL: InlineMode
INLINE_MODE_SUMMARY_TAIL: InlineMode

class RunContext(_message.Message):
    __slots__ = ("run_id", "trigger", "event", "conversation", "actor", "subject", "input", "delivery", "resources", "context", "state", "runtime", "config", "adapter", "metadata", "variables")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    trigger: Trigger
    event: EventContext
    conversation: ConversationContext
    actor: ActorContext
    subject: SubjectContext
    input: RunInput
    delivery: DeliveryContext
    resources: Resources
    context: ContextAccess
    state: RunState
    runtime: RuntimeContext
    config: _struct_pb2.Struct
    adapter: AdapterContext
    metadata: _struct_pb2.Struct
    variables: _struct_pb2.Struct
    def __init__(self, run_id: _Optional[str] = ..., trigger: _Optional[_Union[Trigger, _Mapping]] = ..., event: _Optional[_Union[EventContext, _Mapping]] = ..., conversation: _Optional[_Union[ConversationContext, _Mapping]] = ..., actor: _Optional[_Union[ActorContext, _Mapping]] = ..., subject: _Optional[_Union[SubjectContext, _Mapping]] = ..., input: _Optional[_Union[RunInput, _Mapping]] = ..., delivery: _Optional[_Union[DeliveryContext, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., context: _Optional[_Union[ContextAccess, _Mapping]] = ..., state: _Optional[_Union[RunState, _Mapping]] = ..., runtime: _Optional[_Union[RuntimeContext, _Mapping]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., adapter: _Optional[_Union[AdapterContext, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Trigger(_message.Message):
    __slots__ = ("type", "source", "timestamp")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    type: str
    source: TriggerSource
    timestamp: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[str] = ..., source: _Optional[_Union[TriggerSource, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EventContext(_message.Message):
    __slots__ = ("event_id", "event_type", "event_time", "source", "source_event_type", "raw_ref", "data", "platform_event")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    RAW_REF_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_EVENT_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    event_type: str
    event_time: _timestamp_pb2.Timestamp
    source: str
    source_event_type: str
    raw_ref: RawEventRef
    data: _struct_pb2.Struct
    platform_event: PlatformEvent
    def __init__(self, event_id: _Optional[str] = ..., event_type: _Optional[str] = ..., event_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[str] = ..., source_event_type: _Optional[str] = ..., raw_ref: _Optional[_Union[RawEventRef, _Mapping]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., platform_event: _Optional[_Union[PlatformEvent, _Mapping]] = ...) -> None: ...

class PlatformEvent(_message.Message):
    __slots__ = ("bot_id", "adapter_name", "message_received", "message_recalled", "group_member_joined", "friend_request_received", "interaction_submitted", "schedule_triggered", "api_invoked")
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_RECALLED_FIELD_NUMBER: _ClassVar[int]
    GROUP_MEMBER_JOINED_FIELD_NUMBER: _ClassVar[int]
    FRIEND_REQUEST_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TRIGGERED_FIELD_NUMBER: _ClassVar[int]
    API_INVOKED_FIELD_NUMBER: _ClassVar[int]
    bot_id: str
    adapter_name: str
    message_received: MessageReceivedEvent
    message_recalled: MessageRecalledEvent
    group_member_joined: GroupMemberJoinedEvent
    friend_request_received: FriendRequestReceivedEvent
    interaction_submitted: InteractionSubmittedEvent
    schedule_triggered: ScheduleTriggeredEvent
    api_invoked: ApiInvokedEvent
    def __init__(self, bot_id: _Optional[str] = ..., adapter_name: _Optional[str] = ..., message_received: _Optional[_Union[MessageReceivedEvent, _Mapping]] = ..., message_recalled: _Optional[_Union[MessageRecalledEvent, _Mapping]] = ..., group_member_joined: _Optional[_Union[GroupMemberJoinedEvent, _Mapping]] = ..., friend_request_received: _Optional[_Union[FriendRequestReceivedEvent, _Mapping]] = ..., interaction_submitted: _Optional[_Union[InteractionSubmittedEvent, _Mapping]] = ..., schedule_triggered: _Optional[_Union[ScheduleTriggeredEvent, _Mapping]] = ..., api_invoked: _Optional[_Union[ApiInvokedEvent, _Mapping]] = ...) -> None: ...

class PlatformUser(_message.Message):
    __slots__ = ("id", "nickname", "role")
    ID_FIELD_NUMBER: _ClassVar[int]
    NICKNAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    nickname: str
    role: str
    def __init__(self, id: _Optional[str] = ..., nickname: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class PlatformGroup(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class MessageReceivedEvent(_message.Message):
    __slots__ = ("message_id", "chat_type", "chat_id", "sender", "group", "text", "contents", "quoted_message_id", "mentions_bot")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CHAT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHAT_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    QUOTED_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MENTIONS_BOT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    chat_type: ChatType
    chat_id: str
    sender: PlatformUser
    group: PlatformGroup
    text: str
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    quoted_message_id: str
    mentions_bot: bool
    def __init__(self, message_id: _Optional[str] = ..., chat_type: _Optional[_Union[ChatType, str]] = ..., chat_id: _Optional[str] = ..., sender: _Optional[_Union[PlatformUser, _Mapping]] = ..., group: _Optional[_Union[PlatformGroup, _Mapping]] = ..., text: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., quoted_message_id: _Optional[str] = ..., mentions_bot: _Optional[bool] = ...) -> None: ...

class MessageRecalledEvent(_message.Message):
    __slots__ = ("message_id", "chat_type", "chat_id", "operator", "group")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CHAT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHAT_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    chat_type: ChatType
    chat_id: str
    operator: PlatformUser
    group: PlatformGroup
    def __init__(self, message_id: _Optional[str] = ..., chat_type: _Optional[_Union[ChatType, str]] = ..., chat_id: _Optional[str] = ..., operator: _Optional[_Union[PlatformUser, _Mapping]] = ..., group: _Optional[_Union[PlatformGroup, _Mapping]] = ...) -> None: ...

class GroupMemberJoinedEvent(_message.Message):
    __slots__ = ("group", "member", "inviter", "join_type")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    INVITER_FIELD_NUMBER: _ClassVar[int]
    JOIN_TYPE_FIELD_NUMBER: _ClassVar[int]
    group: PlatformGroup
    member: PlatformUser
    inviter: PlatformUser
    join_type: str
    def __init__(self, group: _Optional[_Union[PlatformGroup, _Mapping]] = ..., member: _Optional[_Union[PlatformUser, _Mapping]] = ..., inviter: _Optional[_Union[PlatformUser, _Mapping]] = ..., join_type: _Optional[str] = ...) -> None: ...

class FriendRequestReceivedEvent(_message.Message):
    __slots__ = ("request_id", "user", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    user: PlatformUser
    message: str
    def __init__(self, request_id: _Optional[str] = ..., user: _Optional[_Union[PlatformUser, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class InteractionSubmittedEvent(_message.Message):
    __slots__ = ("submission",)
    SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    submission: _common_pb2.InteractionSubmission
    def __init__(self, submission: _Optional[_Union[_common_pb2.InteractionSubmission, _Mapping]] = ...) -> None: ...

class ScheduleTriggeredEvent(_message.Message):
    __slots__ = ("schedule_id", "schedule_name", "expression", "scheduled_time", "payload")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_NAME_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    schedule_name: str
    expression: str
    scheduled_time: _timestamp_pb2.Timestamp
    payload: _struct_pb2.Struct
    def __init__(self, schedule_id: _Optional[str] = ..., schedule_name: _Optional[str] = ..., expression: _Optional[str] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ApiInvokedEvent(_message.Message):
    __slots__ = ("operation", "client_id", "payload")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    operation: str
    client_id: str
    payload: _struct_pb2.Struct
    def __init__(self, operation: _Optional[str] = ..., client_id: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RawEventRef(_message.Message):
    __slots__ = ("ref_id", "storage_key")
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    STORAGE_KEY_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    storage_key: str
    def __init__(self, ref_id: _Optional[str] = ..., storage_key: _Optional[str] = ...) -> None: ...

class ConversationContext(_message.Message):
    __slots__ = ("conversation_id", "thread_id", "launcher_type", "launcher_id", "bot_id", "workspace_id", "sender_id", "session_id")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCHER_TYPE_FIELD_NUMBER: _ClassVar[int]
    LAUNCHER_ID_FIELD_NUMBER: _ClassVar[int]
    BOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    thread_id: str
    launcher_type: str
    launcher_id: str
    bot_id: str
    workspace_id: str
    sender_id: str
    session_id: str
    def __init__(self, conversation_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., launcher_type: _Optional[str] = ..., launcher_id: _Optional[str] = ..., bot_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., sender_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ActorContext(_message.Message):
    __slots__ = ("actor_type", "actor_id", "actor_name", "metadata")
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    actor_type: str
    actor_id: str
    actor_name: str
    metadata: _struct_pb2.Struct
    def __init__(self, actor_type: _Optional[str] = ..., actor_id: _Optional[str] = ..., actor_name: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SubjectContext(_message.Message):
    __slots__ = ("subject_type", "subject_id", "data")
    SUBJECT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    subject_type: str
    subject_id: str
    data: _struct_pb2.Struct
    def __init__(self, subject_type: _Optional[str] = ..., subject_id: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RunInput(_message.Message):
    __slots__ = ("text", "contents", "attachments", "message_chain", "interaction")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_CHAIN_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    text: str
    contents: _containers.RepeatedCompositeFieldContainer[_common_pb2.ContentElement]
    attachments: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArtifactRef]
    message_chain: _struct_pb2.Struct
    interaction: _common_pb2.InteractionSubmission
    def __init__(self, text: _Optional[str] = ..., contents: _Optional[_Iterable[_Union[_common_pb2.ContentElement, _Mapping]]] = ..., attachments: _Optional[_Iterable[_Union[_common_pb2.ArtifactRef, _Mapping]]] = ..., message_chain: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., interaction: _Optional[_Union[_common_pb2.InteractionSubmission, _Mapping]] = ...) -> None: ...

class DeliveryContext(_message.Message):
    __slots__ = ("surface", "reply_target", "supports_streaming", "supports_edit", "supports_reaction", "max_message_size", "platform_capabilities", "automatic_reply", "interactions")
    SURFACE_FIELD_NUMBER: _ClassVar[int]
    REPLY_TARGET_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_STREAMING_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_EDIT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_REACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    AUTOMATIC_REPLY_FIELD_NUMBER: _ClassVar[int]
    INTERACTIONS_FIELD_NUMBER: _ClassVar[int]
    surface: str
    reply_target: _struct_pb2.Struct
    supports_streaming: bool
    supports_edit: bool
    supports_reaction: bool
    max_message_size: int
    platform_capabilities: _struct_pb2.Struct
    automatic_reply: bool
    interactions: _common_pb2.InteractionCapabilities
    def __init__(self, surface: _Optional[str] = ..., reply_target: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., supports_streaming: _Optional[bool] = ..., supports_edit: _Optional[bool] = ..., supports_reaction: _Optional[bool] = ..., max_message_size: _Optional[int] = ..., platform_capabilities: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., automatic_reply: _Optional[bool] = ..., interactions: _Optional[_Union[_common_pb2.InteractionCapabilities, _Mapping]] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("models", "tools", "knowledge_bases", "files", "storage", "platform_capabilities", "skills", "platform_actions")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelResource]
    tools: _containers.RepeatedCompositeFieldContainer[ToolResource]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBaseResource]
    files: _containers.RepeatedCompositeFieldContainer[FileResource]
    storage: StorageResource
    platform_capabilities: _struct_pb2.Struct
    skills: _containers.RepeatedCompositeFieldContainer[SkillResource]
    platform_actions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelResource, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[ToolResource, _Mapping]]] = ..., knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBaseResource, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[FileResource, _Mapping]]] = ..., storage: _Optional[_Union[StorageResource, _Mapping]] = ..., platform_capabilities: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., skills: _Optional[_Iterable[_Union[SkillResource, _Mapping]]] = ..., platform_actions: _Optional[_Iterable[str]] = ...) -> None: ...

class SkillResource(_message.Message):
    __slots__ = ("skill_name", "display_name", "description")
    SKILL_NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    skill_name: str
    display_name: str
    description: str
    def __init__(self, skill_name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class ModelResource(_message.Message):
    __slots__ = ("model_id", "model_type", "provider", "operations", "context_window_tokens", "vision")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VISION_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    model_type: str
    provider: str
    operations: _containers.RepeatedScalarFieldContainer[str]
    context_window_tokens: int
    vision: bool
    def __init__(self, model_id: _Optional[str] = ..., model_type: _Optional[str] = ..., provider: _Optional[str] = ..., operations: _Optional[_Iterable[str]] = ..., context_window_tokens: _Optional[int] = ..., vision: _Optional[bool] = ...) -> None: ...

class ToolResource(_message.Message):
    __slots__ = ("tool_name", "tool_type", "description", "operations", "parameters")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    tool_type: str
    description: str
    operations: _containers.RepeatedScalarFieldContainer[str]
    parameters: _struct_pb2.Struct
    def __init__(self, tool_name: _Optional[str] = ..., tool_type: _Optional[str] = ..., description: _Optional[str] = ..., operations: _Optional[_Iterable[str]] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class KnowledgeBaseResource(_message.Message):
    __slots__ = ("kb_id", "kb_name", "kb_type", "operations")
    KB_ID_FIELD_NUMBER: _ClassVar[int]
    KB_NAME_FIELD_NUMBER: _ClassVar[int]
    KB_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    kb_id: str
    kb_name: str
    kb_type: str
    operations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kb_id: _Optional[str] = ..., kb_name: _Optional[str] = ..., kb_type: _Optional[str] = ..., operations: _Optional[_Iterable[str]] = ...) -> None: ...

class FileResource(_message.Message):
    __slots__ = ("file_id", "name", "kind", "mime_type")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    file_id: str
    name: str
    kind: str
    mime_type: str
    def __init__(self, file_id: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class StorageResource(_message.Message):
    __slots__ = ("plugin_storage", "workspace_storage", "binding_storage")
    PLUGIN_STORAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_STORAGE_FIELD_NUMBER: _ClassVar[int]
    BINDING_STORAGE_FIELD_NUMBER: _ClassVar[int]
    plugin_storage: bool
    workspace_storage: bool
    binding_storage: bool
    def __init__(self, plugin_storage: _Optional[bool] = ..., workspace_storage: _Optional[bool] = ..., binding_storage: _Optional[bool] = ...) -> None: ...

class ContextAccess(_message.Message):
    __slots__ = ("conversation_id", "thread_id", "latest_cursor", "event_seq", "transcript_seq", "has_history_before", "inline_policy", "available_apis")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_CURSOR_FIELD_NUMBER: _ClassVar[int]
    EVENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_SEQ_FIELD_NUMBER: _ClassVar[int]
    HAS_HISTORY_BEFORE_FIELD_NUMBER: _ClassVar[int]
    INLINE_POLICY_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_APIS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    thread_id: str
    latest_cursor: str
    event_seq: int
    transcript_seq: int
    has_history_before: bool
    inline_policy: InlineContextPolicy
    available_apis: ContextApis
    def __init__(self, conversation_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., latest_cursor: _Optional[str] = ..., event_seq: _Optional[int] = ..., transcript_seq: _Optional[int] = ..., has_history_before: _Optional[bool] = ..., inline_policy: _Optional[_Union[InlineContextPolicy, _Mapping]] = ..., available_apis: _Optional[_Union[ContextApis, _Mapping]] = ...) -> None: ...

class InlineContextPolicy(_message.Message):
    __slots__ = ("mode", "delivered_count", "source_total_count", "messages_complete", "reason")
    MODE_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    mode: InlineMode
    delivered_count: int
    source_total_count: int
    messages_complete: bool
    reason: str
    def __init__(self, mode: _Optional[_Union[InlineMode, str]] = ..., delivered_count: _Optional[int] = ..., source_total_count: _Optional[int] = ..., messages_complete: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ContextApis(_message.Message):
    __slots__ = ("history_page", "history_search", "event_get", "event_page", "artifact_metadata", "artifact_read", "state", "storage", "prompt_get", "steering_pull", "run_get", "run_list", "run_events_page", "run_cancel", "run_append_result", "run_finalize", "reply")
    HISTORY_PAGE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SEARCH_FIELD_NUMBER: _ClassVar[int]
    EVENT_GET_FIELD_NUMBER: _ClassVar[int]
    EVENT_PAGE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_METADATA_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_READ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_GET_FIELD_NUMBER: _ClassVar[int]
    STEERING_PULL_FIELD_NUMBER: _ClassVar[int]
    RUN_GET_FIELD_NUMBER: _ClassVar[int]
    RUN_LIST_FIELD_NUMBER: _ClassVar[int]
    RUN_EVENTS_PAGE_FIELD_NUMBER: _ClassVar[int]
    RUN_CANCEL_FIELD_NUMBER: _ClassVar[int]
    RUN_APPEND_RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_FINALIZE_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    history_page: bool
    history_search: bool
    event_get: bool
    event_page: bool
    artifact_metadata: bool
    artifact_read: bool
    state: bool
    storage: bool
    prompt_get: bool
    steering_pull: bool
    run_get: bool
    run_list: bool
    run_events_page: bool
    run_cancel: bool
    run_append_result: bool
    run_finalize: bool
    reply: bool
    def __init__(self, history_page: _Optional[bool] = ..., history_search: _Optional[bool] = ..., event_get: _Optional[bool] = ..., event_page: _Optional[bool] = ..., artifact_metadata: _Optional[bool] = ..., artifact_read: _Optional[bool] = ..., state: _Optional[bool] = ..., storage: _Optional[bool] = ..., prompt_get: _Optional[bool] = ..., steering_pull: _Optional[bool] = ..., run_get: _Optional[bool] = ..., run_list: _Optional[bool] = ..., run_events_page: _Optional[bool] = ..., run_cancel: _Optional[bool] = ..., run_append_result: _Optional[bool] = ..., run_finalize: _Optional[bool] = ..., reply: _Optional[bool] = ...) -> None: ...

class RunState(_message.Message):
    __slots__ = ("conversation", "actor", "subject", "runner", "binding", "workspace")
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    BINDING_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    conversation: _struct_pb2.Struct
    actor: _struct_pb2.Struct
    subject: _struct_pb2.Struct
    runner: _struct_pb2.Struct
    binding: _struct_pb2.Struct
    workspace: _struct_pb2.Struct
    def __init__(self, conversation: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., actor: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., subject: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., runner: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., binding: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., workspace: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RuntimeContext(_message.Message):
    __slots__ = ("host", "protocol_version", "host_version", "trace_id", "deadline_at", "locale", "timezone", "static_refs", "metadata")
    class StaticRefsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StaticContextRef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StaticContextRef, _Mapping]] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOST_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    STATIC_REFS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    host: str
    protocol_version: str
    host_version: str
    trace_id: str
    deadline_at: _timestamp_pb2.Timestamp
    locale: str
    timezone: str
    static_refs: _containers.MessageMap[str, StaticContextRef]
    metadata: _struct_pb2.Struct
    def __init__(self, host: _Optional[str] = ..., protocol_version: _Optional[str] = ..., host_version: _Optional[str] = ..., trace_id: _Optional[str] = ..., deadline_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., locale: _Optional[str] = ..., timezone: _Optional[str] = ..., static_refs: _Optional[_Mapping[str, StaticContextRef]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StaticContextRef(_message.Message):
    __slots__ = ("kind", "version", "sha256")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    kind: str
    version: str
    sha256: str
    def __init__(self, kind: _Optional[str] = ..., version: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class AdapterContext(_message.Message):
    __slots__ = ("extra",)
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    extra: _struct_pb2.Struct
    def __init__(self, extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
