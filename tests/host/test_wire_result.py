"""`Run` streams `message.delta` results as bytes the run serialized itself (no response object
built and copied per delta): those bytes must be exactly protobuf's own serialization of the update.
`AttachRun` and `SubmitInteraction` send the run service's updates as they are: their responses must
keep exactly the update's fields."""

from __future__ import annotations

import pytest

from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.services.wire import UPDATE_STREAMS, serialize_update, wire_result


@pytest.mark.parametrize("size", [0, 3, 120, 127, 128, 300, 16_383, 16_384, 70_000, 3_000_000])
def test_a_delta_on_the_wire_is_the_update_protobuf_would_write(size: int) -> None:
    result = result_pb2.RunResult(run_id="run_" + "a" * 32, sequence=7)
    result.timestamp.GetCurrentTime()
    result.message_delta.text = "x" * size
    update = host_service_pb2.HostServiceRunResponse(result=result)
    assert wire_result(result) == update.SerializeToString()
    assert host_service_pb2.HostServiceRunResponse.FromString(wire_result(result)) == update


def test_the_run_serializer_passes_bytes_through_and_serializes_updates() -> None:
    update = host_service_pb2.HostServiceRunResponse()
    update.accepted.run_id = "run_1"
    assert serialize_update(b"\x12\x00") == b"\x12\x00"
    assert serialize_update(update) == update.SerializeToString()


def _shape(descriptor: object) -> list[tuple[object, ...]]:
    return [
        (
            f.name,
            f.number,
            f.type,
            f.message_type.full_name if f.message_type else None,
            f.containing_oneof.name,
        )
        for f in descriptor.fields  # type: ignore[attr-defined]
        if f.containing_oneof is not None
    ] + [(f.name,) for f in descriptor.fields if f.containing_oneof is None]  # type: ignore[attr-defined]


def test_every_update_stream_response_is_the_update_on_the_wire() -> None:
    service = host_service_pb2.DESCRIPTOR.services_by_name["HostService"]
    update = _shape(host_service_pb2.HostServiceRunResponse.DESCRIPTOR)
    for method in UPDATE_STREAMS:
        assert _shape(service.methods_by_name[method].output_type) == update, method
