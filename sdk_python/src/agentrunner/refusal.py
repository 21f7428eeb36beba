"""The host's refusal of a client-streaming call, when grpc.aio lost it.

When the host ends a client-streaming call (`UploadArtifact`, `Control`) while grpc.aio is writing a
request message (a revoked run token is refused after the first message), grpc.aio fails the write and
replaces the call's status with its own: INTERNAL "Internal error from Core" (debug "Failed
execute_batch: SendMessageOperation"). The host's status is gone: neither the trailing metadata nor
`call.code()` keeps it (grpcio 1.7x; a few percent of refused uploads on a loaded machine). The refusals
the host makes before reading a stream are the run token's, which every ProxyService method checks the
same way, so one cheap unary call with the same token (`GetArtifactMetadata` of no artifact) gets the
host's status back: a refused token raises the host's own typed error. When that call passes the token
check, the call's refusal was its own (a size cap, a missing grant) and cannot be recovered: it is a
`HostRefusedError` that says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from agentrunner.errors import (
    AgentRunnerError,
    CredentialsInvalidError,
    HostRefusedError,
    RunTokenInvalidError,
    from_rpc_error,
)
from agentrunner.v1 import proxy_service_pb2 as P
from agentrunner.v1 import proxy_service_pb2_grpc

#: grpc.aio's client-side details for a request write that failed because the call had ended
LOST_STATUS_DETAILS = "Internal error from Core"


def lost_refusal(error: grpc.RpcError) -> bool:
    """Whether `error` is grpc.aio's own status for a write into a call the host had ended."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    return code == grpc.StatusCode.INTERNAL and details == LOST_STATUS_DETAILS


async def recover_refusal(
    method: str,
    stub: proxy_service_pb2_grpc.ProxyServiceAsyncStub,
    metadata: Sequence[tuple[str, str]],
) -> AgentRunnerError:
    """The typed error for a `method` call whose status grpc.aio lost (see the module docstring)."""
    try:
        await stub.GetArtifactMetadata(P.GetArtifactMetadataRequest(), metadata=metadata, timeout=10.0)
    except grpc.RpcError as exc:
        probed = from_rpc_error(exc)
        if isinstance(probed, (RunTokenInvalidError, CredentialsInvalidError)):
            return probed  # (the host's own refusal of the token, which refused `method` too)
    return HostRefusedError(
        f"the host ended {method} before it had read the whole request (it refused the call; "
        "grpc replaced the host's status with 'Internal error from Core')"
    )
