"""A client's calls on recorded runs, transport-neutral: a run's record (`GetRun`), its cancel
(`CancelRun`), pages of runs (`ListRuns`) and the body of an artifact a run made (`DownloadArtifact`).

Each checks its caller through `run/access.py:RunAccess` first (a scoped client gets, cancels and lists
only the runs it may see and reads only their artifacts); typed errors come before anything streams.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from agentrunner.errors import InvalidArgumentError, NotFoundError, RuntimeFailureError
from agentrunner.v1 import host_service_pb2
from agentrunner_host.ports import RunRecord, utcnow
from agentrunner_host.run.access import Caller, RunAccess
from agentrunner_host.store.artifacts import ArtifactStore
from agentrunner_host.store.ledger_reads import LedgerReads, RunQuery
from agentrunner_host.store.ledger_rows import run_to_proto
from agentrunner_host.store.schema.facts import ArtifactRow

Chunk = host_service_pb2.HostServiceDownloadArtifactResponse
#: the default byte cap of one `ListRuns` page (`store.page_max_bytes` in the config)
PAGE_MAX_BYTES = 4 * 1024 * 1024


class Cancels(Protocol):
    """How a run is cancelled (`run.service.RunService.cancel_run`: FAILED_PRECONDITION for a run that
    ended or is open on another replica)."""

    async def cancel_run(self, run_id: str, reason: str = "") -> RunRecord: ...


def run_query(caller: Caller, request: host_service_pb2.ListRunsRequest) -> RunQuery:
    """The request's filters, narrowed to the runs a scoped caller may see."""
    principal = caller.principal
    return RunQuery(
        statuses=tuple(request.statuses),
        agent_id=request.agent_id,
        runner_id=request.runner_id,
        conversation_id=request.conversation_id,
        binding_id=request.binding_id,
        bot_ids=None if principal is None or principal.bots == "*" else tuple(principal.bots),
        agent_ids=None if principal is None or principal.agents == "*" else tuple(principal.agents),
    )


class RunRecords:
    """`GetRun`, `CancelRun`, `ListRuns` and `DownloadArtifact` (see the module docstring). A store left
    out (None) makes its call answer that this host does not offer it."""

    def __init__(
        self,
        access: RunAccess,
        runs: Cancels,
        ledger: LedgerReads | None = None,
        artifacts: ArtifactStore | None = None,
        page_max_bytes: int = PAGE_MAX_BYTES,
    ) -> None:
        self.access = access
        self.runs = runs
        self.ledger = ledger
        self.artifacts = artifacts
        #: byte cap of one `ListRuns` page (sent in the response, so clients know why a page ended)
        self.page_max_bytes = page_max_bytes

    async def get_run(self, caller: Caller, run_id: str) -> host_service_pb2.GetRunResponse:
        """The run's record, when the caller may see it."""
        return host_service_pb2.GetRunResponse(
            run=run_to_proto(await self.access.visible_run(caller, run_id))
        )

    async def cancel_run(
        self, caller: Caller, run_id: str, reason: str
    ) -> host_service_pb2.CancelRunResponse:
        """Cancels a run the caller may see (`RunService.cancel_run`); the record with the cancel noted."""
        await self.access.visible_run(caller, run_id)
        return host_service_pb2.CancelRunResponse(
            run=run_to_proto(await self.runs.cancel_run(run_id, reason))
        )

    async def list_runs(
        self, caller: Caller, request: host_service_pb2.ListRunsRequest
    ) -> host_service_pb2.ListRunsResponse:
        """One page of the runs matching the request's filters that the caller may see, newest first."""
        if self.ledger is None:
            raise RuntimeFailureError("run listing is not available on this host")
        records, token = await self.ledger.search_runs(
            run_query(caller, request), request.page_token, request.page_size, max_bytes=self.page_max_bytes
        )
        return host_service_pb2.ListRunsResponse(
            runs=[run_to_proto(r) for r in records],
            next_page_token=token,
            max_page_bytes=self.page_max_bytes,
        )

    async def download_artifact(self, caller: Caller, artifact_id: str) -> AsyncGenerator[Chunk, None]:
        """The artifact's stream, once the caller may read it: its reference first, then its body in
        chunks (an empty body: the reference alone). NOT_FOUND for an unknown or expired artifact."""
        if not artifact_id:
            raise InvalidArgumentError("artifact_id is required", field="artifact_id")
        if self.artifacts is None:
            raise RuntimeFailureError("artifacts are not available on this host")
        row = await self.artifacts.get(artifact_id)
        if row is None or (row.expires_at is not None and row.expires_at <= utcnow()):
            raise NotFoundError("artifact not found", metadata={"artifactId": artifact_id})
        await self.access.readable_artifact(caller, artifact_id, row.run_id)
        return _chunks(self.artifacts, row)


async def _chunks(artifacts: ArtifactStore, row: ArtifactRow) -> AsyncGenerator[Chunk, None]:
    ref = artifacts.to_ref(row)
    first = True
    async for offset, chunk in artifacts.iter_chunks(row):
        out = Chunk(data=chunk, offset=offset)
        if first:
            out.artifact.CopyFrom(ref)
            first = False
        yield out
    if first:  # an empty body: the reference alone
        yield Chunk(artifact=ref)
