"""How the host's update streams go on the wire: the one place with serializer special-casing.

`Run`, `AttachRun` and `SubmitInteraction` answer with `HostServiceRunResponse` (`Update`) messages as
they are: their response types have exactly its fields (tests/host/test_wire_result.py pins the three
to one shape), so no copy into each RPC's own response type is made per message. `Run` may also hand
over `message.delta` updates already serialized (`wire_result`).
"""

from __future__ import annotations

from agentrunner.v1 import host_service_pb2, result_pb2

Update = host_service_pb2.HostServiceRunResponse

#: streams whose response has exactly `Update`'s fields
UPDATE_STREAMS = ("Run", "AttachRun", "SubmitInteraction")

#: `HostServiceRunResponse.result`'s tag: field number, wire type 2 (length-delimited)
_RESULT_TAG = bytes([Update.DESCRIPTOR.fields_by_name["result"].number << 3 | 2])


def wire_result(result: result_pb2.RunResult) -> bytes:
    """`Update(result=result).SerializeToString()` without building the update (which copies the
    result): the result's bytes behind the field's tag and length."""
    body = result.SerializeToString()
    size = len(body)
    if size < 0x80:
        return _RESULT_TAG + bytes((size,)) + body
    length = bytearray()
    while size >= 0x80:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return _RESULT_TAG + bytes(length) + body


def serialize_update(message: Update | bytes) -> bytes:
    """The response serializer of `UPDATE_STREAMS`: an `Update`'s bytes; updates already serialized go
    as they are."""
    return message if isinstance(message, bytes) else message.SerializeToString()
