"""gRPC server reflection under both names tools ask for, with the contract's comments.

`grpcurl describe`, Postman and grpcui ask `grpc.reflection.v1.ServerReflection` first and fall back to
`v1alpha`; grpcio-reflection serves only `v1alpha`. The two protocols are the same messages under
another package name (identical field numbers), so one servicer answers both: v1 through a generic
handler that reuses the v1alpha message classes.

The descriptors protoc embeds in `*_pb2.py` carry no comments; `make gen` also writes the contract's
files with their source info (`agentrunner/v1/descriptor_set.binpb`, from `buf build`), and those are
what reflection sends for the contract, so `describe` shows the proto comments.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as pb

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
#: both reflection services, for a server's list of service names
SERVICE_NAMES = (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)


@functools.cache
def sourced_files() -> dict[str, bytes]:
    """The contract's files with their source info (comments), serialized, by file name."""
    try:
        raw = (resources.files("agentrunner.v1") / "descriptor_set.binpb").read_bytes()
    except FileNotFoundError:  # a tree without `make gen`'s output: comments are missing, nothing else
        return {}
    files = descriptor_pb2.FileDescriptorSet.FromString(raw).file
    return {f.name: f.SerializeToString() for f in files}


def _not_found(request: pb.ServerReflectionRequest) -> pb.ServerReflectionResponse:
    return pb.ServerReflectionResponse(
        error_response=pb.ErrorResponse(
            error_code=grpc.StatusCode.NOT_FOUND.value[0], error_message=grpc.StatusCode.NOT_FOUND.value[1]
        ),
        original_request=request,
    )


class ReflectionServicer(reflection.aio.ReflectionServicer):
    """grpcio-reflection's servicer, answering file requests with the sourced files where it has them."""

    def __init__(self, service_names: Sequence[str]) -> None:
        super().__init__(service_names)
        self._files = descriptor_pool.Default()

    def _file_by_filename(self, request: pb.ServerReflectionRequest, filename: str) -> Any:
        try:
            found = self._files.FindFileByName(filename)
        except KeyError:
            return _not_found(request)
        return self._with_dependencies(found, request)

    def _file_containing_symbol(self, request: pb.ServerReflectionRequest, name: str) -> Any:
        try:
            found = self._files.FindFileContainingSymbol(name)
        except KeyError:
            return _not_found(request)
        return self._with_dependencies(found, request)

    @staticmethod
    def _with_dependencies(
        file: descriptor.FileDescriptor, request: pb.ServerReflectionRequest
    ) -> pb.ServerReflectionResponse:
        """The file first, then everything it imports (transitively), each once."""
        sourced = sourced_files()
        seen: dict[str, descriptor.FileDescriptor] = {}
        pending = [file]
        while pending:
            current = pending.pop()
            if current.name not in seen:
                seen[current.name] = current
                pending.extend(current.dependencies)
        serialized = []
        for name, found in seen.items():
            raw = sourced.get(name)
            if raw is None:
                proto = descriptor_pb2.FileDescriptorProto()
                found.CopyToProto(proto)
                raw = proto.SerializeToString()
            serialized.append(raw)
        return pb.ServerReflectionResponse(
            file_descriptor_response=pb.FileDescriptorResponse(file_descriptor_proto=serialized),
            original_request=request,
        )


def enable_reflection(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    """Serves reflection (v1 and v1alpha) for `service_names` (the reflection services are added)."""
    servicer = ReflectionServicer([*service_names, *(n for n in SERVICE_NAMES if n not in service_names)])
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=pb.ServerReflectionRequest.FromString,
        response_serializer=pb.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
            for name in SERVICE_NAMES
        )
    )
