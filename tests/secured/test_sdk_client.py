"""The Python SDK's client (`agentrunner.client.host_service_channel`) against a secured host: every
HostService RPC works with a valid key, the streaming ones included, over TLS and over plaintext on
loopback; every RPC refuses a missing or wrong key (UNAUTHENTICATED, CREDENTIALS_INVALID) and a key
whose client lacks the operation (PERMISSION_DENIED naming the method, the operation and the client).
RPCs added later are probed too (the list comes from the service descriptor)."""

from __future__ import annotations

import pathlib
from typing import Any

import grpc
import pytest

from agentrunner.client import ClientCredentials, host_service_channel
from agentrunner.errors import from_rpc_error
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli.render import run_request
from agentrunner_host.config.model import CLIENT_OPERATIONS
from tests.hardening.fuzz import service_methods
from tests.helpers import next_message, rest_of
from tests.pki import Pki
from tests.secured.conftest import FULL, NARROW, WRONG, Stack

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]
SERVICE = "agentrunner.v1.HostService"
#: each RPC's operation (`auth.clients[].operations`)
OPERATION = {"Run": "run", "SubmitInteraction": "interact", "AttachRun": "attach", "GetRun": "get",
             "CancelRun": "cancel", "ListRuns": "list_runs", "ListRunners": "list_runners",
             "DownloadArtifact": "get"}  # fmt: skip


async def _everything(channel: grpc.aio.Channel, tag: str) -> dict[str, Any]:
    """Each HostService RPC once, as a client would use it; what each answered."""
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    seen: dict[str, Any] = {}

    async def run(text: str) -> list[Any]:
        return [
            u async for u in stub.Run(run_request(text, "", "", f"{tag}-{text[:4]}", "sdk", True), timeout=60)
        ]

    seen["Run"] = hello = await run("hello")
    run_id = hello[0].accepted.run_id
    asked = await run("ask:Which colour?")
    interaction = next(u.interaction.request.interaction_id for u in asked if u.HasField("interaction"))
    answer = host_service_pb2.SubmitInteractionRequest(interaction_id=interaction, action_id="submit")
    answer.values.update({"answer": "teal"})
    seen["SubmitInteraction"] = [u async for u in stub.SubmitInteraction(answer, timeout=60)]
    attach = host_service_pb2.AttachRunRequest(run_id=run_id)
    seen["AttachRun"] = [u async for u in stub.AttachRun(attach, timeout=30)]
    seen["GetRun"] = await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)
    seen["ListRuns"] = await stub.ListRuns(host_service_pb2.ListRunsRequest(page_size=50), timeout=10)
    seen["ListRunners"] = await stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=10)
    filed = await run("file:sdk bytes")
    ref = next(
        u.result.run_completed.message.artifacts[0] for u in filed if u.result.HasField("run_completed")
    )
    download = host_service_pb2.HostServiceDownloadArtifactRequest(artifact_id=ref.artifact_id)
    seen["DownloadArtifact"] = [c async for c in stub.DownloadArtifact(download, timeout=30)]
    live = stub.Run(run_request("slow:3000", "", "", f"{tag}-live", "sdk", True), timeout=120)
    live_id = (await next_message(live)).accepted.run_id
    seen["CancelRun"] = await stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=live_id), timeout=10)
    seen["cancelled"] = await rest_of(live)  # (read(), not `async for`: one style per call)
    seen["run_id"] = run_id
    return seen


def _reply(updates: list[Any]) -> str:
    return next(u.result.run_completed.message.content for u in updates if u.result.HasField("run_completed"))


def _check(seen: dict[str, Any]) -> None:
    assert {m.name for m in service_methods(SERVICE)} <= set(seen), "an RPC the helper test does not cover"
    assert seen["Run"][-1].finished.status == 3 and _reply(seen["Run"]) == "echo: hello"
    assert _reply(seen["SubmitInteraction"]) == 'answer to "Which colour?" (submit): teal'
    assert seen["AttachRun"][-1].finished.run_id == seen["run_id"]
    assert seen["GetRun"].run.run_id == seen["run_id"]
    assert seen["run_id"] in {r.run_id for r in seen["ListRuns"].runs}
    assert [r.manifest.id for r in seen["ListRunners"].runners] == ["plugin:test/secured/default"]
    assert b"".join(c.data for c in seen["DownloadArtifact"]) == b"sdk bytes"
    assert seen["cancelled"][-1].finished.status == 5  # cancelled: the live run's own stream saw it end


@pytest.mark.parametrize("stack_name", ["tls_host", "plain_host"])
async def test_every_rpc_works_with_a_valid_key(request: pytest.FixtureRequest, stack_name: str) -> None:
    stack: Stack = request.getfixturevalue(stack_name)
    async with stack.channel(FULL) as channel:
        seen = await _everything(channel, f"sdk-{stack_name}")
    _check(seen)


async def test_credentials_from_the_environment_reach_streaming_calls(
    tls_host: Stack, pki: Pki, tmp_path: pathlib.Path
) -> None:
    key_file = tmp_path / "api.key"
    key_file.write_text(FULL + "\n")
    creds = ClientCredentials.from_env({"AGENTRUNNER_HOST_API_KEY_FILE": str(key_file),
                                        "AGENTRUNNER_HOST_CA_FILE": str(pki.path("ca.pem"))})  # fmt: skip
    assert creds.tls is not None and creds.api_key is not None and FULL not in repr(creds)
    async with host_service_channel(tls_host.address, creds) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        updates = [u async for u in stub.Run(run_request("hello", "", "", "env", "sdk", True), timeout=60)]
    assert updates[-1].finished.status == 3


def _request(name: str) -> Any:
    return {
        "Run": run_request("hello", "", "", "refused", "sdk", True),
        "SubmitInteraction": host_service_pb2.SubmitInteractionRequest(
            interaction_id="int_x", action_id="submit"
        ),
        "AttachRun": host_service_pb2.AttachRunRequest(run_id="run_x"),
        "GetRun": host_service_pb2.GetRunRequest(run_id="run_x"),
        "CancelRun": host_service_pb2.CancelRunRequest(run_id="run_x"),
        "ListRuns": host_service_pb2.ListRunsRequest(),
        "ListRunners": host_service_pb2.HostServiceListRunnersRequest(),
        "DownloadArtifact": host_service_pb2.HostServiceDownloadArtifactRequest(artifact_id="art_x"),
    }[name]


async def _refusal(channel: grpc.aio.Channel, name: str) -> grpc.aio.AioRpcError:
    method = getattr(host_service_pb2_grpc.HostServiceStub(channel), name)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        call = method(_request(name), timeout=10)
        if hasattr(call, "__aiter__"):
            [u async for u in call]
        else:
            await call
    return caught.value


async def test_every_rpc_refuses_missing_wrong_and_narrow_keys(tls_host: Stack) -> None:
    for method in service_methods(SERVICE):
        operation = OPERATION[method.name]
        assert operation in CLIENT_OPERATIONS
        for key in (None, WRONG):
            async with tls_host.channel(key) as channel:
                err = await _refusal(channel, method.name)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (method.name, key, err)
            assert from_rpc_error(err).reason == "CREDENTIALS_INVALID"
        if operation == "attach":  # client `narrow` may attach: its refusal is about the run, not the key
            continue
        async with tls_host.channel(NARROW) as channel:
            err = await _refusal(channel, method.name)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (method.name, err)
        typed = from_rpc_error(err)
        assert typed.reason == "UNAUTHORIZED" and typed.metadata["clientId"] == "narrow"
        assert f"client 'narrow' may not call {method.name}: the operation '{operation}'" in typed.message
