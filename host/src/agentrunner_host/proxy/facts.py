"""Proxy handlers over the host's fact stores (PROTOCOL_V1 §8, AGENT_CONTEXT_PROTOCOL §4).

History, events, artifacts, state, storage, prompt, steering and run records. Every handler checks
the request against `call.snapshot` only, names the resource it touched in `call.audit["resource"]`
and raises `AgentRunnerError` subclasses; the servicer maps them to statuses and records the audit.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from agentrunner.protocol import is_terminal
from agentrunner.v1 import common_pb2, proxy_service_pb2, result_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, RunRecord, utcnow
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.store.common import python_to_value, value_to_python
from agentrunner_host.store.fact_stores import FactStores
from agentrunner_host.store.ledger import run_to_proto
from agentrunner_host.store.state import scope_name
from agentrunner_host.store.storage import area_name
from agentrunner_host.store.transcript import ROLES

pb = proxy_service_pb2

#: agent id -> the agent's prompt messages (sync or async); wired by the host to its agent config
PromptLookup = Callable[
    [str], Sequence[common_pb2.ModelMessage] | Awaitable[Sequence[common_pb2.ModelMessage]]
]
#: (run id, reason) -> asks the run service to cancel a run (after the ledger records the request)
CancelHook = Callable[[str, str], Awaitable[None]]
#: (run id, result) -> appends to a run open in this process through its own stream: the stored result,
#: None when the run's validator dropped it, False when the run is not open here
AppendHook = Callable[[str, result_pb2.RunResult], Awaitable[result_pb2.RunResult | bool | None]]


def _limit(value: int, default: int, cap: int, field: str = "limit") -> int:
    if value < 0:
        raise InvalidArgumentError(f"{field} must not be negative", field=field)
    return min(value or default, cap)


def _fits(sizes: Sequence[int], budget: int) -> int:
    """How many of the leading items (serialized sizes `sizes`) fit in `budget` bytes of a page; at
    least one, so a page always moves on (a single item is bounded by the host's input caps)."""
    used = 0
    for n, size in enumerate(sizes):
        used += size + 6  # the item's tag and length prefix
        if used > budget and n > 0:
            return n
    return len(sizes)


def _cut(page: Message, items: Any, budget: int, *, keep_first: bool) -> bool:
    """Cuts a page's `items` to `budget` bytes (`_fits`), keeping the first or the last ones; True when
    something was cut. Item by item only when the whole page (`page` holds the items) may not fit."""
    if page.ByteSize() + 6 * len(items) <= budget:  # `_fits` would keep them all
        return False
    sizes = [i.ByteSize() for i in items]
    if keep_first:
        keep = _fits(sizes, budget)
        del items[keep:]
        return keep < len(sizes)
    drop = len(sizes) - _fits(sizes[::-1], budget)
    del items[:drop]
    return drop > 0


def _conversation(call: ProxyCall, requested: str) -> tuple[str, str | None]:
    """The conversation to read and the thread filter: the run's own conversation (and thread) unless
    the snapshot grants cross-conversation reads."""
    snap = call.snapshot
    conversation = requested or snap.conversation_id
    if not conversation:
        raise FailedPreconditionError("this run has no conversation", metadata={"runId": call.run_id})
    if conversation != snap.conversation_id and not snap.cross_conversation:
        raise UnauthorizedError(
            "reading another conversation is not authorized for this run",
            metadata={"runId": call.run_id, "resource": f"conversation:{conversation}"},
        )
    own = conversation == snap.conversation_id
    thread = snap.thread_id if own and snap.thread_id and not snap.cross_conversation else None
    return conversation, thread


def fact_handlers(
    stores: FactStores,
    *,
    prompt_lookup: PromptLookup | None = None,
    on_cancel: CancelHook | None = None,
    on_append: AppendHook | None = None,
    is_open: Callable[[str], bool] | None = None,
) -> dict[str, UnaryHandler | StreamHandler]:
    """The handler table for the fact RPCs, to merge into the proxy servicer's table."""
    settings = stores.settings

    # -- history ---------------------------------------------------------------------------------

    def _stale(field: str) -> InvalidArgumentError:
        return InvalidArgumentError("the cursor is stale: it points past this conversation", field=field)

    async def list_history(call: ProxyCall, request: pb.ListHistoryRequest) -> pb.ListHistoryResponse:
        conversation, thread = _conversation(call, request.conversation_id)
        call.require("page" in call.snapshot.history, "history page", f"history:{conversation}")
        limit = _limit(request.limit, settings.history_page_default, settings.history_page_cap)
        forward = request.direction == pb.PAGE_DIRECTION_FORWARD
        decode = stores.transcript.decode_cursor
        before = (
            decode(conversation, request.before_cursor, "before_cursor") if request.before_cursor else None
        )
        after = decode(conversation, request.after_cursor, "after_cursor") if request.after_cursor else None
        response = pb.ListHistoryResponse(max_page_bytes=settings.page_max_bytes)
        items = response.items
        has_more, total = await stores.transcript.page_into(
            items,
            conversation_id=conversation,
            thread_id=thread,
            before_seq=before,
            after_seq=after,
            forward=forward,
            limit=limit,
            include_artifacts=request.include_artifacts,
        )
        # Thread-filtered totals count the thread; the conversation's end is the bound either way.
        end = total if thread is None else await stores.transcript.latest_seq(conversation)
        for field, position in (("before_cursor", before), ("after_cursor", after)):
            if position is not None and position > (end or 0) + 1:
                raise _stale(field)
        if total is not None:
            response.total_count = total
        # the page's byte cap: forward pages keep their oldest items, backward pages their newest (the
        # ones next to the cursor); what is cut comes with the next page
        cut = _cut(response, items, settings.page_max_bytes, keep_first=forward)
        has_more = response.has_more = has_more or cut
        # the page's own items carry the cursors of its ends
        if forward:
            # Always continuable: new items may be appended after the newest one.
            response.next_cursor = items[-1].cursor if items else request.after_cursor
            response.prev_cursor = items[0].cursor if items else ""
        else:
            response.next_cursor = items[0].cursor if items and has_more else ""
            response.prev_cursor = items[-1].cursor if items else ""
        call.audit["items"] = len(items)
        return response

    async def search_history(call: ProxyCall, request: pb.SearchHistoryRequest) -> pb.SearchHistoryResponse:
        conversation, thread = _conversation(call, request.conversation_id)
        call.require("search" in call.snapshot.history, "history search", f"history:{conversation}")
        if not request.query.strip():
            raise InvalidArgumentError("query is required", field="query")
        if any(role not in ROLES for role in request.roles):
            raise InvalidArgumentError("roles are user or assistant", field="roles")
        top_k = _limit(request.top_k, 10, settings.search_cap, "top_k")
        rows = await stores.transcript.search(
            conversation_id=conversation,
            thread_id=thread,
            query=request.query,
            roles=list(request.roles),
            top_k=top_k,
        )
        response = pb.SearchHistoryResponse(query=request.query, max_page_bytes=settings.page_max_bytes)
        stores.transcript.fill_items(response.items, rows)
        _cut(response, response.items, settings.page_max_bytes, keep_first=True)
        return response

    # -- events ----------------------------------------------------------------------------------

    async def get_event(call: ProxyCall, request: pb.GetEventRequest) -> pb.GetEventResponse:
        call.require("get" in call.snapshot.events, "event get", f"event:{request.event_id}")
        if not request.event_id:
            raise InvalidArgumentError("event_id is required", field="event_id")
        row = await stores.events.get(request.event_id)
        if row is None:
            raise NotFoundError("event not found", metadata={"eventId": request.event_id})
        snap = call.snapshot
        visible = (
            (row.conversation_id and row.conversation_id == snap.conversation_id)
            or row.run_id == snap.run_id
            or snap.cross_conversation
        )
        if not visible:
            raise UnauthorizedError(
                "the event belongs to another conversation",
                metadata={"resource": f"event:{request.event_id}"},
            )
        return pb.GetEventResponse(event=stores.events.to_proto(row))

    async def list_events(call: ProxyCall, request: pb.ListEventsRequest) -> pb.ListEventsResponse:
        conversation, _ = _conversation(call, request.conversation_id)
        call.require("page" in call.snapshot.events, "event page", f"events:{conversation}")
        limit = _limit(request.limit, 50, settings.events_page_cap)
        before = (
            stores.events.decode_cursor(conversation, request.before_cursor, "before_cursor")
            if request.before_cursor
            else None
        )
        rows, has_more = await stores.events.page(
            conversation_id=conversation,
            before_seq=before,
            event_types=list(request.event_types),
            limit=limit,
        )
        items = [stores.events.to_proto(r) for r in rows]
        keep = _fits([i.ByteSize() for i in reversed(items)], settings.page_max_bytes)  # newest first
        if keep < len(items):
            items, rows, has_more = items[len(items) - keep :], rows[len(rows) - keep :], True
        return pb.ListEventsResponse(
            items=items,
            next_cursor=stores.events.cursor(rows[0]) if rows and has_more else "",
            has_more=has_more,
            max_page_bytes=settings.page_max_bytes,
        )

    # -- artifacts -------------------------------------------------------------------------------

    async def get_artifact_metadata(
        call: ProxyCall, request: pb.GetArtifactMetadataRequest
    ) -> pb.GetArtifactMetadataResponse:
        call.require(
            "metadata" in call.snapshot.artifacts, "artifact metadata", f"artifact:{request.artifact_id}"
        )
        row = await stores.artifacts.authorize(call.snapshot, request.artifact_id)
        return pb.GetArtifactMetadataResponse(artifact=stores.artifacts.to_metadata(row))

    async def read_artifact(call: ProxyCall, request: pb.ReadArtifactRequest) -> pb.ReadArtifactResponse:
        call.require("read" in call.snapshot.artifacts, "artifact read", f"artifact:{request.artifact_id}")
        row = await stores.artifacts.authorize(call.snapshot, request.artifact_id)
        data, has_more = await stores.artifacts.read_range(row, request.offset, request.length)
        call.audit["bytes"] = len(data)
        return pb.ReadArtifactResponse(
            data=data,
            offset=request.offset,
            size_bytes=row.size_bytes,
            has_more=has_more,
            max_read_bytes=stores.artifacts.limits.read_cap_bytes,
        )

    async def download_artifact(
        call: ProxyCall, request: pb.DownloadArtifactRequest
    ) -> AsyncIterator[pb.DownloadArtifactResponse]:
        call.require("read" in call.snapshot.artifacts, "artifact read", f"artifact:{request.artifact_id}")
        row = await stores.artifacts.authorize(call.snapshot, request.artifact_id)
        async for offset, chunk in stores.artifacts.iter_chunks(row):
            call.time_remaining()
            yield pb.DownloadArtifactResponse(data=chunk, offset=offset)

    async def upload_artifact(
        call: ProxyCall, requests: AsyncIterator[pb.UploadArtifactRequest]
    ) -> pb.UploadArtifactResponse:
        """The header first, then the body; stored as an artifact of the run and its conversation."""
        call.require("write" in call.snapshot.artifacts, "artifact upload", "artifact:upload")
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgumentError("UploadArtifact starts with its header", field="header")
        header = first.header

        async def chunks() -> AsyncIterator[bytes]:
            async for item in requests:
                if item.WhichOneof("part") != "chunk":
                    raise InvalidArgumentError("only body chunks follow the header", field="chunk")
                yield item.chunk

        snap = call.snapshot
        ref = await stores.artifacts.put_stream(
            chunks(),
            cap=snap.artifact_upload_max_bytes or stores.artifacts.limits.max_bytes,
            size_bytes=header.size_bytes if header.HasField("size_bytes") else None,
            sha256=header.sha256,
            source="runner",
            conversation_id=snap.conversation_id,
            run_id=snap.run_id,
            binding_id=snap.binding_id,
            mime_type=header.mime_type or "application/octet-stream",
            name=header.name,
            summary=header.summary,
            expires_at=header.expires_at.ToDatetime(tzinfo=dt.UTC) if header.HasField("expires_at") else None,
            metadata=json_format.MessageToDict(header.metadata) if header.HasField("metadata") else None,
        )
        call.audit.update(resource=f"artifact:{ref.artifact_id}", bytes=ref.size_bytes, sha256=ref.sha256)
        return pb.UploadArtifactResponse(artifact=ref)

    # -- state -----------------------------------------------------------------------------------

    def _state_resource(call: ProxyCall, scope: int, key: str) -> None:
        name = scope_name(scope) if scope else "unspecified"
        call.audit["resource"] = f"state:{name}:{key}"

    async def get_state(call: ProxyCall, request: pb.GetStateRequest) -> pb.GetStateResponse:
        _state_resource(call, request.scope, request.key)
        found, value = await stores.state.get(call.snapshot, request.scope, request.key)
        response = pb.GetStateResponse(found=found)
        if found:
            response.value.CopyFrom(python_to_value(value))
        return response

    async def set_state(call: ProxyCall, request: pb.SetStateRequest) -> pb.SetStateResponse:
        _state_resource(call, request.scope, request.key)
        if not request.HasField("value"):
            raise InvalidArgumentError("value is required (a null value deletes)", field="value")
        await stores.state.set(call.snapshot, request.scope, request.key, value_to_python(request.value))
        return pb.SetStateResponse()

    async def delete_state(call: ProxyCall, request: pb.DeleteStateRequest) -> pb.DeleteStateResponse:
        _state_resource(call, request.scope, request.key)
        return pb.DeleteStateResponse(
            deleted=await stores.state.delete(call.snapshot, request.scope, request.key)
        )

    async def list_state(call: ProxyCall, request: pb.ListStateRequest) -> pb.ListStateResponse:
        _state_resource(call, request.scope, request.prefix + "*")
        keys, has_more = await stores.state.list(
            call.snapshot, request.scope, request.prefix, _limit(request.limit, 100, 100)
        )
        return pb.ListStateResponse(keys=keys, has_more=has_more)

    # -- storage ---------------------------------------------------------------------------------

    def _storage_resource(call: ProxyCall, area: int, key: str) -> None:
        name = area_name(area) if area else "unspecified"
        call.audit["resource"] = f"storage:{name}:{key}"

    async def get_storage(call: ProxyCall, request: pb.GetStorageRequest) -> pb.GetStorageResponse:
        _storage_resource(call, request.area, request.key)
        value = await stores.storage.get(call.snapshot, request.area, request.key)
        return pb.GetStorageResponse(found=value is not None, value=value or b"")

    async def set_storage(call: ProxyCall, request: pb.SetStorageRequest) -> pb.SetStorageResponse:
        _storage_resource(call, request.area, request.key)
        await stores.storage.set(call.snapshot, request.area, request.key, request.value)
        return pb.SetStorageResponse()

    async def delete_storage(call: ProxyCall, request: pb.DeleteStorageRequest) -> pb.DeleteStorageResponse:
        _storage_resource(call, request.area, request.key)
        return pb.DeleteStorageResponse(
            deleted=await stores.storage.delete(call.snapshot, request.area, request.key)
        )

    async def list_storage(call: ProxyCall, request: pb.ListStorageRequest) -> pb.ListStorageResponse:
        _storage_resource(call, request.area, request.prefix + "*")
        keys, has_more = await stores.storage.list(
            call.snapshot, request.area, request.prefix, _limit(request.limit, 1000, 1000)
        )
        return pb.ListStorageResponse(keys=keys, has_more=has_more)

    # -- prompt and steering -----------------------------------------------------------------------

    async def get_prompt(call: ProxyCall, request: pb.GetPromptRequest) -> pb.GetPromptResponse:
        call.require(call.snapshot.prompt, "prompt get", f"prompt:{call.snapshot.agent_id}")
        if prompt_lookup is None:
            return pb.GetPromptResponse()
        messages = prompt_lookup(call.snapshot.agent_id)
        if inspect.isawaitable(messages):
            messages = await messages
        return pb.GetPromptResponse(messages=list(messages))

    async def pull_steering(call: ProxyCall, request: pb.PullSteeringRequest) -> pb.PullSteeringResponse:
        snap = call.snapshot
        call.require(snap.steering, "steering pull", f"steering:{snap.conversation_id}")
        if request.limit < 0:
            raise InvalidArgumentError("limit must not be negative", field="limit")
        if not snap.conversation_id:
            return pb.PullSteeringResponse()
        items = await stores.steering.claim(
            run_id=snap.run_id,
            conversation_id=snap.conversation_id,
            limit=request.limit,
            max_bytes=settings.page_max_bytes,
        )
        return pb.PullSteeringResponse(items=items, max_page_bytes=settings.page_max_bytes)

    # -- run records -----------------------------------------------------------------------------

    async def _visible_run(call: ProxyCall, run_id: str, operation: str) -> RunRecord:
        run_id = run_id or call.run_id
        call.require(operation in call.snapshot.runs, f"run {operation}", f"run:{run_id}")
        record = await stores.ledger.get_run(run_id)
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

    async def get_run_record(call: ProxyCall, request: pb.GetRunRecordRequest) -> pb.GetRunRecordResponse:
        return pb.GetRunRecordResponse(run=run_to_proto(await _visible_run(call, request.run_id, "get")))

    async def list_run_records(
        call: ProxyCall, request: pb.ListRunRecordsRequest
    ) -> pb.ListRunRecordsResponse:
        conversation, _ = _conversation(call, request.conversation_id)
        call.require("list" in call.snapshot.runs, "run list", f"runs:{conversation}")
        records, cursor = await stores.ledger.list_runs(
            conversation,
            statuses=list(request.statuses),
            before_cursor=request.before_cursor,
            limit=_limit(request.limit, 50, settings.runs_page_cap),
            max_bytes=settings.page_max_bytes,
        )
        return pb.ListRunRecordsResponse(
            runs=[run_to_proto(r) for r in records],
            next_cursor=cursor,
            has_more=bool(cursor),
            max_page_bytes=settings.page_max_bytes,
        )

    async def list_run_record_events(
        call: ProxyCall, request: pb.ListRunRecordEventsRequest
    ) -> pb.ListRunRecordEventsResponse:
        record = await _visible_run(call, request.run_id, "events_page")
        limit = _limit(request.limit, 50, settings.events_page_cap)
        results = list(await stores.ledger.list_results(record.run_id, request.after_sequence, limit + 1))
        has_more = len(results) > limit
        results = results[:limit]
        keep = _fits([r.ByteSize() for r in results], settings.page_max_bytes)
        return pb.ListRunRecordEventsResponse(
            results=results[:keep],
            has_more=has_more or keep < len(results),
            max_page_bytes=settings.page_max_bytes,
        )

    def _open_elsewhere(record: RunRecord, what: str) -> FailedPreconditionError:
        """A run still open that this replica does not hold: another replica runs it (or ran it and
        is gone). Until replicas relay such requests, this one refuses them rather than claim them."""
        return FailedPreconditionError(
            f"run {record.run_id!r} is not open on this host replica: {what} it on the replica that runs it",
            metadata={"runId": record.run_id},
        )

    def _held_here(record: RunRecord) -> bool:
        return is_open is not None and is_open(record.run_id)

    async def cancel_run_record(
        call: ProxyCall, request: pb.CancelRunRecordRequest
    ) -> pb.CancelRunRecordResponse:
        record = await _visible_run(call, request.run_id, "cancel")
        if record.status not in TERMINAL_STATUSES:
            if not _held_here(record):
                raise _open_elsewhere(record, "cancel")
            updated = await stores.ledger.request_cancel(record.run_id, utcnow())
            record = updated or record
            if on_cancel is not None:
                await on_cancel(record.run_id, request.reason or f"cancelled by run {call.run_id}")
        return pb.CancelRunRecordResponse(run=run_to_proto(record))

    async def append_run_result(
        call: ProxyCall, request: pb.AppendRunResultRequest
    ) -> pb.AppendRunResultResponse:
        """Joins the open run's stream: the run numbers and validates the result like one its runner
        streamed (a sequence in the request is ignored: the host owns the numbering, so an appended
        result can never collide with the run's own or leave a gap)."""
        record = await _visible_run(call, request.run_id, "append_result")
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
        joined = await on_append(record.run_id, result) if on_append is not None else False
        if joined is None:
            raise InvalidArgumentError(
                "the run refused the result (see its validation rules)", field="result"
            )
        if joined is False:
            raise _open_elsewhere(record, "append to")
        assert isinstance(joined, result_pb2.RunResult)
        return pb.AppendRunResultResponse(result=joined)

    async def finalize_run_record(
        call: ProxyCall, request: pb.FinalizeRunRecordRequest
    ) -> pb.FinalizeRunRecordResponse:
        record = await _visible_run(call, request.run_id, "finalize")
        if request.status not in TERMINAL_STATUSES:
            raise InvalidArgumentError("status must be a terminal status", field="status")
        if record.status not in TERMINAL_STATUSES:
            # an open run's terminal is its stream's to decide (its runner's terminal result, or a cancel)
            if _held_here(record):
                raise FailedPreconditionError(
                    f"run {record.run_id!r} is open: it ends with its own terminal result, or CancelRunRecord",
                    metadata={"runId": record.run_id},
                )
            raise _open_elsewhere(record, "finalize")
        return pb.FinalizeRunRecordResponse(run=run_to_proto(record))

    handlers: dict[str, Any] = {
        "ListHistory": list_history,
        "SearchHistory": search_history,
        "GetEvent": get_event,
        "ListEvents": list_events,
        "GetArtifactMetadata": get_artifact_metadata,
        "ReadArtifact": read_artifact,
        "DownloadArtifact": download_artifact,
        "UploadArtifact": upload_artifact,
        "GetState": get_state,
        "SetState": set_state,
        "DeleteState": delete_state,
        "ListState": list_state,
        "GetStorage": get_storage,
        "SetStorage": set_storage,
        "DeleteStorage": delete_storage,
        "ListStorage": list_storage,
        "GetPrompt": get_prompt,
        "PullSteering": pull_steering,
        "GetRunRecord": get_run_record,
        "ListRunRecords": list_run_records,
        "ListRunRecordEvents": list_run_record_events,
        "CancelRunRecord": cancel_run_record,
        "AppendRunResult": append_run_result,
        "FinalizeRunRecord": finalize_run_record,
    }
    return handlers
