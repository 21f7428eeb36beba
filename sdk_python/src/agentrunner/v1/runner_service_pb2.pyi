from agentrunner.v1 import context_pb2 as _context_pb2
from agentrunner.v1 import manifest_pb2 as _manifest_pb2
from agentrunner.v1 import result_pb2 as _result_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListRunnersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunnersResponse(_message.Message):
    __slots__ = ("runners",)
    RUNNERS_FIELD_NUMBER: _ClassVar[int]
    runners: _containers.RepeatedCompositeFieldContainer[_manifest_pb2.RunnerManifest]
    def __init__(self, runners: _Optional[_Iterable[_Union[_manifest_pb2.RunnerManifest, _Mapping]]] = ...) -> None: ...

class DescribeRunnerRequest(_message.Message):
    __slots__ = ("runner_id",)
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    runner_id: str
    def __init__(self, runner_id: _Optional[str] = ...) -> None: ...

class DescribeRunnerResponse(_message.Message):
    __slots__ = ("runner",)
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    runner: _manifest_pb2.RunnerManifest
    def __init__(self, runner: _Optional[_Union[_manifest_pb2.RunnerManifest, _Mapping]] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("runner_id", "runner_name", "context", "run_token", "host_api_endpoint")
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNER_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOST_API_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    runner_id: str
    runner_name: str
    context: _context_pb2.RunContext
    run_token: str
    host_api_endpoint: str
    def __init__(self, runner_id: _Optional[str] = ..., runner_name: _Optional[str] = ..., context: _Optional[_Union[_context_pb2.RunContext, _Mapping]] = ..., run_token: _Optional[str] = ..., host_api_endpoint: _Optional[str] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _result_pb2.RunResult
    def __init__(self, result: _Optional[_Union[_result_pb2.RunResult, _Mapping]] = ...) -> None: ...
