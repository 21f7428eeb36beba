"""The fuzzer over every RPC of HostService and ProxyService, generated from the descriptors.

A host process on SQLite and the rogue runner; ProxyService calls carry the token of a live run (the
caller acts as that run's runner). Every answer must be OK or a typed status carrying exactly one
`ErrorInfo` of our domain, never UNKNOWN; the host logs no traceback for what the clients sent, stays
up, serves a normal run afterwards, and the integrity check finds nothing.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentrunner.errors import DOMAIN
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import common_pb2
from tests.hardening.conftest import Matrix, checked, record, run_to_end, soak_or
from tests.hardening.fuzz import RequestFuzzer, service_methods

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOST_SERVICE = "agentrunner.v1.HostService"
PROXY_SERVICE = "agentrunner.v1.ProxyService"
#: cases per RPC (fast matrix; `make soak` runs 25x as many)
CASES = soak_or(60, 1500)
ident = lambda b: b  # noqa: E731


def typed(err: grpc.aio.AioRpcError) -> str | None:
    """The ErrorInfo reason of a status, or None when the status carries none of ours."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    if status is None:
        return None
    infos = []
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info):
            infos.append(info)
    if len(infos) != 1 or infos[0].domain != DOMAIN:
        return None
    return infos[0].reason


async def call(
    channel: grpc.aio.Channel, service: str, method: object, body: bytes, metadata: list[tuple[str, str]]
) -> tuple[str, str | None]:
    """(status code name, ErrorInfo reason) of one fuzzed call."""
    name = f"/{service}/{method.name}"  # type: ignore[attr-defined]
    try:
        if method.client_streaming:  # type: ignore[attr-defined]
            stream = channel.stream_stream(name, request_serializer=ident, response_deserializer=ident)
            responses = stream(iter([body]), metadata=metadata, timeout=3)
            async for _ in responses:
                pass
        elif method.server_streaming:  # type: ignore[attr-defined]
            unary_stream = channel.unary_stream(name, request_serializer=ident, response_deserializer=ident)
            async for _ in unary_stream(body, metadata=metadata, timeout=3):
                pass
        else:
            unary = channel.unary_unary(name, request_serializer=ident, response_deserializer=ident)
            await unary(body, metadata=metadata, timeout=3)
    except grpc.aio.AioRpcError as err:
        return err.code().name, typed(err)
    return "OK", ""


async def test_every_rpc_answers_fuzzed_requests_with_a_typed_status(
    matrix_sqlite: Matrix,
) -> None:
    host = matrix_sqlite.host
    async with host.channel() as channel:
        fuzzer = RequestFuzzer(seed=16)
        outcomes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        untyped: list[tuple[str, str, bytes]] = []
        started = time.monotonic()
        calls = 0
        holders: list[asyncio.Task[Any]] = []
        for service in (HOST_SERVICE, PROXY_SERVICE):
            for method in service_methods(service):
                metadata: list[tuple[str, str]] = []
                if service == PROXY_SERVICE:
                    # a live run per RPC, whose token the fuzzer uses as that run's runner would (fuzzed
                    # cancels and finalizes end the run they name, the calling run by default)
                    holder, live = await matrix_sqlite.token_run(channel)
                    holders.append(holder)
                    metadata = [(RUN_TOKEN_HEADER, live["token"]), (RUN_ID_HEADER, live["run_id"])]
                bodies = list(fuzzer.cases(method, CASES))
                for i in range(0, len(bodies), 8):  # eight at a time: the host sees concurrent calls
                    batch = bodies[i : i + 8]
                    answers = await asyncio.gather(
                        *(call(channel, service, method, b, metadata) for b in batch)
                    )
                    for body, (code, reason) in zip(batch, answers, strict=True):
                        calls += 1
                        outcomes[(method.name, code, reason or "")] += 1
                        if code != "OK" and reason is None and code != "DEADLINE_EXCEEDED":
                            untyped.append((method.name, code, body[:80]))
        elapsed = time.monotonic() - started
        # the host is alive and still does its job
        updates = await run_to_end(channel, "hello after fuzzing", conversation_id="after-fuzz")
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, updates[-1]
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
    record("calls fuzzed", calls)
    codes = collections.Counter(code for (_, code, _), n in outcomes.items() for _ in range(n))
    print(
        f"\nfuzz: {calls} calls over {len({m for m, _, _ in outcomes})} RPCs in {elapsed:.1f}s: {dict(codes)}"
    )
    assert not untyped, f"{len(untyped)} answers without a typed status, e.g. {untyped[:5]}"
    assert codes.get("UNKNOWN", 0) == 0
    log = host.log_text()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 : log.find("Traceback") + 3000]
    await asyncio.sleep(0.5)
    report = checked(host.config["database"]["url"])
    print(report.summary())
    assert report.ok, "\n".join(map(str, report.problems[:20]))
