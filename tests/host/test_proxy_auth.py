"""Proxy service: run-token authentication, snapshot authorization, deadline clipping, audit, control
stream. Calls come from the fake runner process (real gRPC) unless a test needs a crafted session."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Awaitable

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import host_service_pb2, proxy_service_pb2, proxy_service_pb2_grpc
from agentrunner_host.auth.authz import issue_session
from agentrunner_host.ports import AuthorizationSnapshot, utcnow
from agentrunner_host.proxy.api import ProxyCall
from tests.helpers import next_message, rest_of
from tests.host.conftest import Host, audited, results, run_request

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def outcome(host: Host, text: str) -> tuple[dict[str, str], str]:
    updates = await host.run(text)
    return json.loads(results(updates)[0].message_completed.message.content), updates[0].accepted.run_id


def platform_audit(host: Host, run_id: str) -> Awaitable[list[str]]:
    return audited(host, run_id, "RequestPlatformAction")


async def test_ungranted_resource_is_permission_denied_and_audited(host: Host) -> None:
    result, run_id = await outcome(host, "proxy platform message.delete")
    assert result == {"code": "PERMISSION_DENIED", "reason": "UNAUTHORIZED"}
    assert await platform_audit(host, run_id) == ["UNAUTHORIZED"]


async def test_granted_but_reserved_action_is_not_implemented(host: Host) -> None:
    result, run_id = await outcome(host, "proxy platform message.edit")
    assert result == {"code": "UNIMPLEMENTED", "reason": "NOT_IMPLEMENTED"}
    assert await platform_audit(host, run_id) == ["NOT_IMPLEMENTED"]


async def test_missing_token_is_unauthenticated_and_audited(host: Host) -> None:
    result, run_id = await outcome(host, "proxy none")
    assert result == {"code": "UNAUTHENTICATED", "reason": "RUN_TOKEN_INVALID"}
    assert await platform_audit(host, run_id) == ["RUN_TOKEN_INVALID"]


async def test_another_runs_token_is_unauthenticated_and_audited(host: Host) -> None:
    held = host.stub.Run(run_request("stall"), timeout=30)
    held_run = (await next_message(held)).accepted.run_id
    await held.read()
    try:
        result, run_id = await outcome(host, "proxy steal")
        assert result == {"code": "UNAUTHENTICATED", "reason": "RUN_TOKEN_INVALID"}
        assert await platform_audit(host, run_id) == ["RUN_TOKEN_INVALID"]
    finally:
        await host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=held_run), timeout=5)
        while await held.read() is not grpc.aio.EOF:
            pass


async def test_token_is_dead_after_the_run(host: Host) -> None:
    await host.run("echo first")
    result, _ = await outcome(host, "proxy reuse")
    assert result == {"code": "UNAUTHENTICATED", "reason": "RUN_TOKEN_INVALID"}


def snapshot(run_id: str, deadline_in: float = 30.0, **kwargs) -> AuthorizationSnapshot:
    return AuthorizationSnapshot(
        run_id=run_id,
        runner_id="plugin:test/fake/default",
        agent_id="a",
        binding_id="b",
        deadline_at=utcnow() + dt.timedelta(seconds=deadline_in),
        **kwargs,
    )


async def tool_detail(
    call: ProxyCall, request: proxy_service_pb2.GetToolDetailRequest
) -> proxy_service_pb2.GetToolDetailResponse:
    """A stand-in capability handler: checks the snapshot like the real ones must."""
    call.require(request.tool_name in call.snapshot.tools, f"tool {request.tool_name!r}", request.tool_name)
    if request.tool_name == "slow":
        await asyncio.sleep(5)
    return proxy_service_pb2.GetToolDetailResponse()


@pytest.fixture
def proxy_stub(host: Host) -> proxy_service_pb2_grpc.ProxyServiceStub:
    host.app.proxy.register({"GetToolDetail": tool_detail})
    return proxy_service_pb2_grpc.ProxyServiceStub(host.channel)


async def test_expired_token_is_unauthenticated(host: Host, proxy_stub) -> None:
    snap = snapshot("run_expiring", tools={"weather": frozenset({"detail"})})
    token, session = issue_session(snap, utcnow() + dt.timedelta(seconds=0.3))
    await host.app.stores.sessions.register(session)
    md = (("x-agentrunner-run-token", token),)
    await proxy_stub.GetToolDetail(
        proxy_service_pb2.GetToolDetailRequest(tool_name="weather"), metadata=md, timeout=5
    )
    await asyncio.sleep(0.4)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await proxy_stub.GetToolDetail(
            proxy_service_pb2.GetToolDetailRequest(tool_name="weather"), metadata=md, timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert from_rpc_error(err.value).reason == "RUN_TOKEN_INVALID"
    assert (await audited(host, "", "GetToolDetail"))[-1] == "RUN_TOKEN_INVALID"
    await host.app.stores.sessions.unregister("run_expiring")


async def test_ungranted_tool_is_denied_from_the_frozen_snapshot(host: Host, proxy_stub) -> None:
    snap = snapshot("run_tools", tools={"weather": frozenset({"detail"})})
    token, session = issue_session(snap, utcnow() + dt.timedelta(seconds=30))
    await host.app.stores.sessions.register(session)
    md = (("x-agentrunner-run-token", token),)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await proxy_stub.GetToolDetail(
            proxy_service_pb2.GetToolDetailRequest(tool_name="shell"), metadata=md, timeout=5
        )
    typed = from_rpc_error(err.value)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and typed.reason == "UNAUTHORIZED"
    assert typed.metadata["resource"] == "shell"
    assert await audited(host, "run_tools", "GetToolDetail") == ["UNAUTHORIZED"]
    await host.app.stores.sessions.unregister("run_tools")


async def test_calls_are_clipped_to_the_run_deadline(host: Host, proxy_stub) -> None:
    snap = snapshot("run_clip", deadline_in=0.3, tools={"slow": frozenset({"detail"})})
    token, session = issue_session(snap, utcnow() + dt.timedelta(seconds=30))
    await host.app.stores.sessions.register(session)
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await proxy_stub.GetToolDetail(
            proxy_service_pb2.GetToolDetailRequest(tool_name="slow"),
            metadata=(("x-agentrunner-run-token", token),),
            timeout=10,
        )
    assert time.monotonic() - started < 2
    assert from_rpc_error(err.value).reason == "DEADLINE_EXCEEDED"
    await host.app.stores.sessions.unregister("run_clip")


async def test_unregistered_method_is_not_implemented(host: Host) -> None:
    snap = snapshot("run_unimpl")
    token, session = issue_session(snap, utcnow() + dt.timedelta(seconds=30))
    await host.app.stores.sessions.register(session)
    saved = dict(host.app.proxy.handlers)
    host.app.proxy.handlers.clear()
    try:
        stub = proxy_service_pb2_grpc.ProxyServiceStub(host.channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetPrompt(
                proxy_service_pb2.GetPromptRequest(),
                metadata=(("x-agentrunner-run-token", token),),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert from_rpc_error(err.value).reason == "NOT_IMPLEMENTED"
    finally:
        host.app.proxy.handlers.update(saved)
        await host.app.stores.sessions.unregister("run_unimpl")


async def test_control_hello_with_a_bad_token_is_refused(host: Host) -> None:
    stub = proxy_service_pb2_grpc.ProxyServiceStub(host.channel)
    call = stub.Control(timeout=5)
    hello = proxy_service_pb2.ControlRequest()
    hello.hello.run_id = "run_x"
    hello.hello.run_token = "not-a-token"
    await call.write(hello)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_new_input_for_an_open_steering_run_is_queued_into_it(host: Host) -> None:
    """A second event for the conversation of an open steering run starts no run: it is pushed on the
    control stream (and acked), and its caller is attached to the open run's live results."""
    call = host.stub.Run(run_request("control", conversation_id="steer-conv"), timeout=30)
    run_id = (await next_message(call)).accepted.run_id
    assert (await next_message(call)).result.message_delta.text.startswith("welcome:")
    second = host.stub.Run(run_request("also this", conversation_id="steer-conv"), timeout=30)
    accepted = (await next_message(second)).accepted
    assert accepted.run_id == run_id and accepted.attached
    got = (await next_message(call)).result.message_delta.text
    assert got == "steering:also this\n"
    assert (await next_message(second)).result.message_delta.text == got  # the attached caller sees it live
    channel = host.app.hub.get(run_id)
    assert channel is not None
    for _ in range(40):
        if channel.acks:
            break
        await asyncio.sleep(0.05)
    assert [a.accepted for a in channel.acks.values()] == [True]
    await host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id), timeout=5)
    for stream in (call, second):
        rest = await rest_of(stream)
        last = rest[-1] if rest else None
        assert last is not None and last.finished.run_id == run_id
    # the steering input was recorded as the conversation's user message, owned by the open run
    page, _, _ = await host.app.stores.transcript.page(
        conversation_id="steer-conv", thread_id=None, before_seq=None, after_seq=None, forward=True, limit=10
    )
    assert [(r.role, r.content, r.run_id) for r in page][:2] == [
        ("user", "control", run_id),
        ("user", "also this", run_id),
    ]
