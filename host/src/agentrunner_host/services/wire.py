"""How the host's update streams go on the wire: the one place with serializer special-casing.

`Run`, `AttachRun` and `SubmitInteraction` answer with `HostServiceRunResponse` (`Update`) messages as
they are: their response types have exactly its fields (tests/host/test_wire_result.py pins the three
to one shape), so no copy into each RPC's own response type is made per message.
"""

from __future__ import annotations

from agentrunner.v1 import host_service_pb2

Update = host_service_pb2.HostServiceRunResponse

#: streams whose response has exactly `Update`'s fields
UPDATE_STREAMS = ("Run", "AttachRun", "SubmitInteraction")


def serialize_update(message: Update) -> bytes:
    """The response serializer of `UPDATE_STREAMS`: the update's own bytes."""
    return message.SerializeToString()
