"""What clients send that the host cannot take, on a host process over SQLite and over PostgreSQL: the
same typed answer on both (INVALID_ARGUMENT with `ErrorInfo` and `BadRequest`), a short message, no
traceback in the log, an audit record for refused proxy calls, nothing half-written (issue 16 items 3,
7, 9, 10, 11)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentrunner.errors import from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import (
    common_pb2,
    host_service_pb2,
    host_service_pb2_grpc,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
)
from tests.hardening.conftest import Matrix, checked, run_request, run_to_end
from tests.hardening.fuzz import service_methods

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Matrix:
    return request.getfixturevalue(f"matrix_{request.param}")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def channel(backend: Matrix) -> AsyncIterator[grpc.aio.Channel]:
    async with backend.host.channel() as ch:
        yield ch


def invalid(err: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    """Asserts the status is INVALID_ARGUMENT with our ErrorInfo; returns its BadRequest violations."""
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert from_rpc_error(err).reason == "INVALID_ARGUMENT"
    assert len(err.details() or "") <= 512
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Is(bad.DESCRIPTOR) and detail.Unpack(bad):
            return [(v.field, v.description) for v in bad.field_violations]
    raise AssertionError("no BadRequest detail")


def no_traceback(backend: Matrix) -> None:
    log = backend.host.log_text()
    assert "Traceback" not in log, log[log.find("Traceback") - 500 :][:3000]


async def test_undecodable_requests_are_invalid_argument_on_every_rpc(
    backend: Matrix, channel: grpc.aio.Channel
) -> None:
    """Item 9: was UNKNOWN "Unexpected DecodeError" without ErrorInfo, with a traceback per call."""
    ident = lambda b: b  # noqa: E731
    garbage = b"\x0a\xff\xff\xff\xff\x0f"
    for service in ("agentrunner.v1.HostService", "agentrunner.v1.ProxyService"):
        for method in service_methods(service):
            name = f"/{service}/{method.name}"
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                if method.client_streaming:
                    call = channel.stream_stream(name, request_serializer=ident, response_deserializer=ident)
                    async for _ in call(iter([garbage]), timeout=10):
                        pass
                elif method.server_streaming:
                    stream = channel.unary_stream(name, request_serializer=ident, response_deserializer=ident)
                    async for _ in stream(garbage, timeout=10):
                        pass
                else:
                    unary = channel.unary_unary(name, request_serializer=ident, response_deserializer=ident)
                    await unary(garbage, timeout=10)
            err = caught.value
            if service.endswith("ProxyService") and method.name != "Control":
                # no run token: refused before the request is looked at, typed all the same
                assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (name, err.code())
                continue
            assert invalid(err) == [("", "malformed protobuf encoding")], name
    no_traceback(backend)


async def test_values_the_host_cannot_carry_are_invalid_argument(
    backend: Matrix, channel: grpc.aio.Channel
) -> None:
    """Items 7 and 10: were INTERNAL (or UNKNOWN), and on PostgreSQL only; now the same everywhere."""
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    cases: list[tuple[str, host_service_pb2.HostServiceRunRequest]] = []
    req = run_request("hello")
    req.event.event_time.seconds = 2**40
    cases.append(("event.event_time", req))
    req = run_request("hello")
    req.event.data.update({"x": math.nan})
    cases.append(("event.data.x", req))
    cases.append(("event.input.text", run_request("nul\x00inside")))
    cases.append(("event.conversation.conversation_id", run_request("x", conversation_id="c\x00")))
    cases.append(("event.event_id", run_request("x", event_id="e" * 129)))
    req = run_request("x")
    req.event.input.attachments.add(name="a", uri="http://[::1")
    cases.append(("event.input.attachments[0].uri", req))
    req = run_request("x")
    req.event.input.attachments.add(name="a", data_url="data:image/png;base64,@@@not base64")
    cases.append(("event.input.attachments[0].data_url", req))
    for field, request in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            [u async for u in stub.Run(request, timeout=10)]
        violations = invalid(caught.value)
        assert violations[0][0] == field, (field, violations)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        [
            u
            async for u in stub.AttachRun(
                host_service_pb2.AttachRunRequest(run_id="run_x", after_sequence=2**63)
            )
        ]
    assert invalid(caught.value)[0][0] == "after_sequence"
    # nothing of the refused events was recorded
    assert backend.sql("SELECT count(*) FROM runs")[0][0] == len(backend.sql("SELECT run_id FROM runs"))
    assert not backend.sql("SELECT run_id FROM runs WHERE event_id = :e", e="e" * 129)
    no_traceback(backend)


async def test_a_refused_attachment_leaves_nothing_and_the_corrected_event_runs(
    backend: Matrix, channel: grpc.aio.Channel
) -> None:
    """Item 3 (the attachment case): the refusal used to leave a RUNNING run row, and the corrected
    retry of the same event id got ALREADY_EXISTS."""
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    bad = run_request("look", event_id=f"evt-attach-{backend.name}")
    bad.event.input.attachments.add(name="a.png", data_url="data:image/png;base64,%%%")
    for _ in range(2):  # a retry of the same request is refused the same way, at once
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            [u async for u in stub.Run(bad, timeout=10)]
        invalid(caught.value)
    assert not backend.sql("SELECT run_id FROM runs WHERE event_id = :e", e=bad.event.event_id)
    good = run_request("look", event_id=bad.event.event_id)
    good.event.input.attachments.add(name="a.png", data_url="data:image/png;base64,iVBORw0KGgo=")
    updates = [u async for u in stub.Run(good, timeout=30)]
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, updates[-1]


async def test_errors_quote_a_bounded_prefix_of_the_input(backend: Matrix, channel: grpc.aio.Channel) -> None:
    """Item 11: a 100k-character run id turned NOT_FOUND into RESOURCE_EXHAUSTED (trailer too big)."""
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetRun(host_service_pb2.GetRunRequest(run_id="r" * 100_000), timeout=10)
    assert invalid(caught.value) == [("run_id", "is 100000 characters long; at most 64")]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetRun(host_service_pb2.GetRunRequest(run_id="run_" + "9" * 60), timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(caught.value.details() or "") < 200


async def test_refused_proxy_calls_are_typed_and_audited(backend: Matrix, channel: grpc.aio.Channel) -> None:
    """Item 7: a NUL storage key gave UNKNOWN without ErrorInfo and its audit row failed too; NaN in
    SetState and after_sequence >= 2^63 gave INTERNAL."""
    holder, live = await backend.token_run(channel, 120, conversation_id="wire-proxy")
    md = [(RUN_TOKEN_HEADER, live["token"]), (RUN_ID_HEADER, live["run_id"])]
    proxy = proxy_service_pb2_grpc.ProxyServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await proxy.SetStorage(
            proxy_service_pb2.SetStorageRequest(
                area=proxy_service_pb2.STORAGE_AREA_NAME_PLUGIN, key="k\x00ey", value=b"v"
            ),
            metadata=md,
            timeout=10,
        )
    assert invalid(caught.value) == [("key", "must not contain NUL characters")]
    bad_state = proxy_service_pb2.SetStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, key="k")
    bad_state.value.number_value = math.nan
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await proxy.SetState(bad_state, metadata=md, timeout=10)
    assert invalid(caught.value) == [("value", "must be a finite number, not nan")]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await proxy.ListRunRecordEvents(
            proxy_service_pb2.ListRunRecordEventsRequest(after_sequence=2**63), metadata=md, timeout=10
        )
    assert invalid(caught.value)[0][0] == "after_sequence"
    audits = backend.sql(
        "SELECT event_type FROM event_log WHERE kind = 'audit' AND run_id = :r AND summary LIKE '%INVALID_ARGUMENT'",
        r=live["run_id"],
    )
    assert sorted(a[0] for a in audits) == ["ListRunRecordEvents", "SetState", "SetStorage"]
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    no_traceback(backend)


async def test_the_host_is_whole_afterwards(backend: Matrix, channel: grpc.aio.Channel) -> None:
    updates = await run_to_end(channel, "fine", conversation_id=f"after-{backend.name}")
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    await asyncio.sleep(0.5)
    report = checked(backend.url)
    assert report.ok, "\n".join(map(str, report.problems))
