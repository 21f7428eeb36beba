"""Run records: reading the ledger, and cancelling, appending to or finalizing a run through it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from agentrunner.protocol import is_terminal
from agentrunner.v1 import proxy_service_pb2, result_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.paging import FactArea, conversation_of, fits, limit_of
from agentrunner_host.store.fact_stores import FactStores
from agentrunner_host.store.ledger_rows import run_to_proto

pb = proxy_service_pb2

#: (run id, reason) -> cancels an open run (`RunService.cancel_run`: here, or on the replica that
#: runs it); FAILED_PRECONDITION when it ended meanwhile
CancelHook = Callable[[str, str], Awaitable[object]]
#: (run id, result) -> appends to an open run through its own stream (here, or on the replica that runs
#: it): the stored result, None when the run's validator dropped it, False when the run is not open
AppendHook = Callable[[str, result_pb2.RunResult], Awaitable[result_pb2.RunResult | bool | None]]


class RunRecords(FactArea):
    """GetRunRecord, ListRunRecords, ListRunRecordEvents, CancelRunRecord, AppendRunResult, FinalizeRunRecord."""

    def __init__(
        self,
        stores: FactStores,
        *,
        on_cancel: CancelHook | None = None,
        on_append: AppendHook | None = None,
    ) -> None:
        super().__init__(stores)
        self.on_cancel = on_cancel
        self.on_append = on_append

    def table(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {
            "GetRunRecord": self.get_run_record,
            "ListRunRecords": self.list_run_records,
            "ListRunRecordEvents": self.list_run_record_events,
            "CancelRunRecord": self.cancel_run_record,
            "AppendRunResult": self.append_run_result,
            "FinalizeRunRecord": self.finalize_run_record,
        }

    async def _visible_run(self, call: ProxyCall, run_id: str, operation: str) -> RunRecord:
        run_id = run_id or call.run_id
        call.require(operation in call.snapshot.runs, f"run {operation}", f"run:{run_id}")
        record = await self.stores.ledger.get_run(run_id)
        if record is None:
            raise NotFoundError("run not found", metadata={"runId": run_id})
        snap = call.snapshot
        # another run is visible through the run's own conversation only: two runs without a
        # conversation share none (their empty conversation ids are not a conversation)
        same_conversation = bool(snap.conversation_id) and record.conversation_id == snap.conversation_id
        if record.run_id != snap.run_id and not same_conversation and not snap.cross_conversation:
            raise UnauthorizedError(
                "the run belongs to another conversation", metadata={"resource": f"run:{run_id}"}
            )
        return record

    async def get_run_record(
        self, call: ProxyCall, request: pb.GetRunRecordRequest
    ) -> pb.GetRunRecordResponse:
        return pb.GetRunRecordResponse(run=run_to_proto(await self._visible_run(call, request.run_id, "get")))

    async def list_run_records(
        self, call: ProxyCall, request: pb.ListRunRecordsRequest
    ) -> pb.ListRunRecordsResponse:
        conversation, _ = conversation_of(call, request.conversation_id)
        call.require("list" in call.snapshot.runs, "run list", f"runs:{conversation}")
        records, cursor = await self.stores.ledger.list_runs(
            conversation,
            statuses=list(request.statuses),
            before_cursor=request.before_cursor,
            limit=limit_of(request.limit, 50, self.settings.runs_page_cap),
            max_bytes=self.settings.page_max_bytes,
        )
        return pb.ListRunRecordsResponse(
            runs=[run_to_proto(r) for r in records],
            next_cursor=cursor,
            has_more=bool(cursor),
            max_page_bytes=self.settings.page_max_bytes,
        )

    async def list_run_record_events(
        self, call: ProxyCall, request: pb.ListRunRecordEventsRequest
    ) -> pb.ListRunRecordEventsResponse:
        record = await self._visible_run(call, request.run_id, "events_page")
        limit = limit_of(request.limit, 50, self.settings.events_page_cap)
        results = list(
            await self.stores.ledger.list_results(record.run_id, request.after_sequence, limit + 1)
        )
        has_more = len(results) > limit
        results = results[:limit]
        keep = fits([r.ByteSize() for r in results], self.settings.page_max_bytes)
        return pb.ListRunRecordEventsResponse(
            results=results[:keep],
            has_more=has_more or keep < len(results),
            max_page_bytes=self.settings.page_max_bytes,
        )

    async def cancel_run_record(
        self, call: ProxyCall, request: pb.CancelRunRecordRequest
    ) -> pb.CancelRunRecordResponse:
        """Cancels an open run (whichever replica runs it, the same grace and terminal); a run that
        ended is answered as it is."""
        record = await self._visible_run(call, request.run_id, "cancel")
        if record.status not in TERMINAL_STATUSES and self.on_cancel is not None:
            try:
                await self.on_cancel(record.run_id, request.reason or f"cancelled by run {call.run_id}")
            except FailedPreconditionError:
                pass  # it ended meanwhile
            record = await self.stores.ledger.get_run(record.run_id) or record
        return pb.CancelRunRecordResponse(run=run_to_proto(record))

    async def append_run_result(
        self, call: ProxyCall, request: pb.AppendRunResultRequest
    ) -> pb.AppendRunResultResponse:
        """Joins the open run's stream: the run numbers and validates the result like one its runner
        streamed (a sequence in the request is ignored: the host owns the numbering, so an appended
        result can never collide with the run's own or leave a gap)."""
        record = await self._visible_run(call, request.run_id, "append_result")
        if record.status in TERMINAL_STATUSES:
            raise FailedPreconditionError("the run has already ended", metadata={"runId": record.run_id})
        result = result_pb2.RunResult()
        result.CopyFrom(request.result)
        if result.WhichOneof("payload") is None:
            raise InvalidArgumentError("the result has no (known) payload", field="result")
        if is_terminal(result):
            raise InvalidArgumentError("end a run with FinalizeRunRecord", field="result")
        result.run_id = record.run_id
        result.sequence = 0
        if not result.HasField("timestamp"):
            result.timestamp.GetCurrentTime()
        joined = await self.on_append(record.run_id, result) if self.on_append is not None else False
        if joined is None:
            raise InvalidArgumentError(
                "the run refused the result (see its validation rules)", field="result"
            )
        if joined is False:
            raise FailedPreconditionError("the run has already ended", metadata={"runId": record.run_id})
        assert isinstance(joined, result_pb2.RunResult)
        return pb.AppendRunResultResponse(result=joined)

    async def finalize_run_record(
        self, call: ProxyCall, request: pb.FinalizeRunRecordRequest
    ) -> pb.FinalizeRunRecordResponse:
        record = await self._visible_run(call, request.run_id, "finalize")
        if request.status not in TERMINAL_STATUSES:
            raise InvalidArgumentError("status must be a terminal status", field="status")
        if record.status not in TERMINAL_STATUSES:
            # an open run's terminal is its stream's to decide (its runner's terminal result, or a cancel),
            # on every replica alike
            raise FailedPreconditionError(
                f"run {record.run_id!r} is open: it ends with its own terminal result, or CancelRunRecord",
                metadata={"runId": record.run_id},
            )
        return pb.FinalizeRunRecordResponse(run=run_to_proto(record))
