"""A runner's `UploadArtifact` that the host refuses while a chunk is in flight: grpc.aio replaces the
host's status with its own INTERNAL "Internal error from Core" (`agentrunner.refusal`); the SDK gives
the runner the host's own refusal (a revoked or unknown run token) or a `HostRefusedError` that says
the host refused the call, never a bare INTERNAL."""

from __future__ import annotations

import grpc
import pytest

from agentrunner.api import HostApi
from agentrunner.errors import HostRefusedError, RunTokenInvalidError
from agentrunner.testing import HostDouble
from agentrunner.v1 import context_pb2
from tests.host.conftest import Host

pytestmark = pytest.mark.asyncio(loop_scope="session")

BODY = b"x" * (2 << 20)  # 2 MiB: 32 chunks of 64 KiB, so the host's refusal meets writes in flight


def api_for(endpoint: str, token: str) -> HostApi:
    return HostApi(
        endpoint,
        run_id="run_" + "0" * 32,
        run_token=token,
        available_apis=context_pb2.ContextApis(artifact_write=True),
    )


class LostStatus:
    """A ProxyService stub whose UploadArtifact ends as grpc.aio ends it when the race is lost."""

    def __init__(self, stub: object) -> None:
        self._stub = stub

    def __getattr__(self, name: str) -> object:
        return getattr(self._stub, name)

    async def UploadArtifact(self, *args: object, **kwargs: object) -> object:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "Internal error from Core"
        )


async def test_a_revoked_token_is_the_hosts_refusal_even_when_grpc_lost_the_status(host: Host) -> None:
    api = api_for(host.address, "x" * 43)  # unknown to the host: refused like a revoked one
    with pytest.raises(RunTokenInvalidError):
        await api.upload_artifact(BODY, name="a.bin")
    api._stub = LostStatus(api.stub)  # type: ignore[assignment]  # (the race, forced)
    with pytest.raises(RunTokenInvalidError) as caught:
        await api.upload_artifact(BODY, name="a.bin")
    assert "revoked" in caught.value.message


async def test_refused_uploads_in_a_row_all_carry_the_hosts_refusal(host: Host) -> None:
    """The real race (a few percent of refused uploads on a loaded machine): every one is typed."""
    api = api_for(host.address, "y" * 43)
    for _ in range(20):
        with pytest.raises(RunTokenInvalidError):
            await api.upload_artifact(BODY, name="a.bin")


async def test_a_refusal_of_the_call_itself_is_a_host_refused_error() -> None:
    """When the token is good the lost status was the call's own refusal (a cap, a grant): typed, and
    the message says the host refused it."""
    async with HostDouble(check_token=False) as double:
        api = api_for(double.endpoint, "t")
        api._stub = LostStatus(api.stub)  # type: ignore[assignment]
        with pytest.raises(HostRefusedError) as caught:
            await api.upload_artifact(b"body", name="a.bin")
    assert "refused the call" in caught.value.message
