"""The handler seam of the proxy service (PROTOCOL_V1 §8).

The gRPC servicer (`servicer.py`) authenticates the run token, loads the frozen snapshot, clips the
deadline, audits, and maps errors; the capability families (models, tools, knowledge in
`capabilities.py`; history, events, artifacts, state, storage, steering and run records in `facts.py`)
are transport-neutral handlers registered by RPC method name. A handler checks the request against
`call.snapshot` only (never recomputes authorization) and raises `agentrunner.errors.AgentRunnerError`
subclasses for every refusal.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from google.protobuf.message import Message

from agentrunner.errors import DeadlineExceededError, UnauthorizedError
from agentrunner_host.ports import AuthorizationSnapshot, RunSession


@dataclasses.dataclass(slots=True)
class ProxyCall:
    """One authenticated proxy call."""

    session: RunSession
    method: str
    #: monotonic time at which the call must be finished (min of the gRPC deadline and the run deadline)
    deadline: float | None = None
    #: W3C traceparent of the caller, when sent
    traceparent: str = ""
    #: audit details a handler adds (e.g. the resource it touched); the servicer records them
    audit: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: `time.perf_counter()` when the call was accepted (its latency metric)
    started: float = dataclasses.field(default_factory=time.perf_counter)

    @property
    def snapshot(self) -> AuthorizationSnapshot:
        return self.session.snapshot

    @property
    def run_id(self) -> str:
        return self.session.run_id

    def time_remaining(self) -> float | None:
        """Seconds left, or None when unbounded. Raises when already past the deadline."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError("the run deadline has passed", metadata={"runId": self.run_id})
        return left

    def require(self, allowed: bool, what: str, resource: str = "") -> None:
        """Refuses with UNAUTHORIZED unless `allowed` (a check against `self.snapshot`)."""
        if resource:
            self.audit.setdefault("resource", resource)
        if not allowed:
            raise UnauthorizedError(
                f"{what} is not authorized for this run",
                metadata={"runId": self.run_id, "resource": resource or what},
            )


UnaryHandler = Callable[[ProxyCall, Any], Awaitable[Message]]
StreamHandler = Callable[[ProxyCall, Any], AsyncIterator[Message]]
#: RPC method name (e.g. "ListHistory") -> handler. Server-streaming RPCs map to StreamHandler; the
#: client-streaming `UploadArtifact` is a UnaryHandler called with an async iterator of its requests.
HandlerTable = Mapping[str, UnaryHandler | StreamHandler]


class AuditSink(Protocol):
    """Where the servicer records one audit record per proxy call (PROTOCOL_V1 §11)."""

    async def record_proxy_call(
        self,
        *,
        run_id: str,
        runner_id: str,
        method: str,
        resource: str,
        outcome: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None: ...
