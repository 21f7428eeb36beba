"""Mutual TLS on a secured host: the client certificate identifies client `ops` for the CLI and the SDK
client alike, streaming calls included; a key sent with it names its own client; a certificate the
host's CA did not sign, or none, ends at the TLS handshake, and the CLI says which it was; a certificate
from the host's CA that no client lists is refused typed, naming it."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli.render import run_request
from tests.pki import Pki
from tests.secured.conftest import FULL, Stack

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


def _cert_env(pki: Pki, name: str) -> dict[str, str]:
    return {"AGENTRUNNER_HOST_CERT_FILE": str(pki.path(f"{name}.pem")),
            "AGENTRUNNER_HOST_KEY_FILE": str(pki.path(f"{name}.key"))}  # fmt: skip


async def test_the_sdk_client_is_the_client_its_certificate_names(mtls_host: Stack, pki: Pki) -> None:
    async with mtls_host.channel(FULL, cert="laptop", pki=pki) as keyed:  # the key wins: client `full`
        stub = host_service_pb2_grpc.HostServiceStub(keyed)
        ran = [u async for u in stub.Run(run_request("hello", "", "", "mtls", "sdk", True), timeout=60)]
    run_id = ran[0].accepted.run_id
    assert ran[-1].finished.status == 3
    async with mtls_host.channel(cert="laptop", pki=pki) as channel:  # no key: the certificate, client `ops`
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        attached = [
            u async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=30)
        ]
        assert attached[-1].finished.run_id == run_id
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            [u async for u in stub.Run(run_request("hello", "", "", "mtls", "sdk", True), timeout=30)]
    err = from_rpc_error(caught.value)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "client 'ops' may not call Run: the operation 'run'" in err.message
    async with mtls_host.channel(cert="visitor", pki=pki) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await host_service_pb2_grpc.HostServiceStub(channel).ListRuns(
                host_service_pb2.ListRunsRequest(), timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (
        "the client certificate (visitor) names no client of this host"
        in from_rpc_error(caught.value).message
    )
    for cert in ("stranger", None):  # another CA's certificate, or none: the handshake fails
        async with mtls_host.channel(cert=cert, pki=pki) if cert else mtls_host.channel() as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await host_service_pb2_grpc.HostServiceStub(channel).ListRuns(
                    host_service_pb2.ListRunsRequest(), timeout=10
                )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, cert


async def test_the_cli_follows_with_the_certificate_and_explains_refused_handshakes(
    mtls_host: Stack, pki: Pki
) -> None:
    laptop = _cert_env(pki, "laptop")
    ran = await mtls_host.cli("run", "hello over mtls", AGENTRUNNER_HOST_API_KEY=FULL, **laptop)
    assert ran.code == 0 and "echo: hello over mtls" in ran.stdout, ran.stderr
    run_id = ran.stderr.split("started ", 1)[1].split()[0]
    shown, listed, refused, stranger, none, visitor = await asyncio.gather(
        mtls_host.cli("runs", "show", run_id, **laptop),  # GetRun + AttachRun as ops
        mtls_host.cli("runs", "list", "--quiet", **laptop),
        mtls_host.cli("run", "hello", **laptop),  # ops may not run
        mtls_host.cli("runners", **_cert_env(pki, "stranger")),
        mtls_host.cli("runners"),
        mtls_host.cli("runners", **_cert_env(pki, "visitor")),
    )
    assert shown.code == 0 and "echo: hello over mtls" in shown.stdout, shown.stderr
    assert listed.code == 0 and run_id in listed.stdout.split()
    assert refused.code == 1 and "UNAUTHORIZED: client 'ops' may not call Run" in refused.stderr
    assert (
        stranger.code == 1
        and "closed the connection during the TLS handshake: it did not accept the client certificate"
        in stranger.stderr
    )
    assert str(pki.path("stranger.pem")) in stranger.stderr
    assert (
        none.code == 1
        and "it requires a client certificate (mutual TLS): pass --cert-file and --key-file" in none.stderr
    )
    assert (
        visitor.code == 1
        and "the client certificate (visitor) names no client of this host" in visitor.stderr
    )
    assert f"the client certificate sent was {pki.path('visitor.pem')}" in visitor.stderr
    for done in (refused, stranger, none, visitor):
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
