"""`Run`, `AttachRun` and `SubmitInteraction` send the run service's updates as they are: their
responses must keep exactly the update's fields."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor

from agentrunner.v1 import host_service_pb2
from agentrunner_host.services.wire import UPDATE_STREAMS


def _shape(descriptor: Descriptor) -> list[tuple[object, ...]]:
    return [
        (
            f.name,
            f.number,
            f.type,
            f.message_type.full_name if f.message_type else None,
            f.containing_oneof.name,
        )
        for f in descriptor.fields
        if f.containing_oneof is not None
    ] + [(f.name,) for f in descriptor.fields if f.containing_oneof is None]


def test_every_update_stream_response_is_the_update_on_the_wire() -> None:
    service = host_service_pb2.DESCRIPTOR.services_by_name["HostService"]
    update = _shape(host_service_pb2.HostServiceRunResponse.DESCRIPTOR)
    for method in UPDATE_STREAMS:
        assert _shape(service.methods_by_name[method].output_type) == update, method
