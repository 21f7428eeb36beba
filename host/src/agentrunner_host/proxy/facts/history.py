"""History and events: the conversation's transcript pages and search, and its event log."""

from __future__ import annotations

from agentrunner.errors import (
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.paging import FactArea, conversation_of, cut, fits, limit_of
from agentrunner_host.store.transcript import ROLES

pb = proxy_service_pb2


def _stale(field: str) -> InvalidArgumentError:
    return InvalidArgumentError("the cursor is stale: it points past this conversation", field=field)


class ConversationReads(FactArea):
    """ListHistory, SearchHistory, GetEvent, ListEvents."""

    def table(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {
            "ListHistory": self.list_history,
            "SearchHistory": self.search_history,
            "GetEvent": self.get_event,
            "ListEvents": self.list_events,
        }

    async def list_history(self, call: ProxyCall, request: pb.ListHistoryRequest) -> pb.ListHistoryResponse:
        conversation, thread = conversation_of(call, request.conversation_id)
        call.require("page" in call.snapshot.history, "history page", f"history:{conversation}")
        limit = limit_of(request.limit, self.settings.history_page_default, self.settings.history_page_cap)
        forward = request.direction == pb.PAGE_DIRECTION_FORWARD
        decode = self.stores.transcript.decode_cursor
        before = (
            decode(conversation, request.before_cursor, "before_cursor") if request.before_cursor else None
        )
        after = decode(conversation, request.after_cursor, "after_cursor") if request.after_cursor else None
        response = pb.ListHistoryResponse(max_page_bytes=self.settings.page_max_bytes)
        items = response.items
        has_more, total = await self.stores.transcript.page_into(
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
        end = total if thread is None else await self.stores.transcript.latest_seq(conversation)
        for field, position in (("before_cursor", before), ("after_cursor", after)):
            if position is not None and position > (end or 0) + 1:
                raise _stale(field)
        if total is not None:
            response.total_count = total
        # the page's byte cap: forward pages keep their oldest items, backward pages their newest (the
        # ones next to the cursor); what is cut comes with the next page
        was_cut = cut(response, items, self.settings.page_max_bytes, keep_first=forward)
        has_more = response.has_more = has_more or was_cut
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

    async def search_history(
        self, call: ProxyCall, request: pb.SearchHistoryRequest
    ) -> pb.SearchHistoryResponse:
        conversation, thread = conversation_of(call, request.conversation_id)
        call.require("search" in call.snapshot.history, "history search", f"history:{conversation}")
        if not request.query.strip():
            raise InvalidArgumentError("query is required", field="query")
        if any(role not in ROLES for role in request.roles):
            raise InvalidArgumentError("roles are user or assistant", field="roles")
        top_k = limit_of(request.top_k, 10, self.settings.search_cap, "top_k")
        rows = await self.stores.transcript.search(
            conversation_id=conversation,
            thread_id=thread,
            query=request.query,
            roles=list(request.roles),
            top_k=top_k,
        )
        response = pb.SearchHistoryResponse(query=request.query, max_page_bytes=self.settings.page_max_bytes)
        self.stores.transcript.fill_items(response.items, rows)
        cut(response, response.items, self.settings.page_max_bytes, keep_first=True)
        return response

    async def get_event(self, call: ProxyCall, request: pb.GetEventRequest) -> pb.GetEventResponse:
        call.require("get" in call.snapshot.events, "event get", f"event:{request.event_id}")
        if not request.event_id:
            raise InvalidArgumentError("event_id is required", field="event_id")
        row = await self.stores.events.get(request.event_id)
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
        return pb.GetEventResponse(event=self.stores.events.to_proto(row))

    async def list_events(self, call: ProxyCall, request: pb.ListEventsRequest) -> pb.ListEventsResponse:
        conversation, _ = conversation_of(call, request.conversation_id)
        call.require("page" in call.snapshot.events, "event page", f"events:{conversation}")
        limit = limit_of(request.limit, 50, self.settings.events_page_cap)
        before = (
            self.stores.events.decode_cursor(conversation, request.before_cursor, "before_cursor")
            if request.before_cursor
            else None
        )
        rows, has_more = await self.stores.events.page(
            conversation_id=conversation,
            before_seq=before,
            event_types=list(request.event_types),
            limit=limit,
        )
        items = [self.stores.events.to_proto(r) for r in rows]
        keep = fits([i.ByteSize() for i in reversed(items)], self.settings.page_max_bytes)  # newest first
        if keep < len(items):
            items, rows, has_more = items[len(items) - keep :], rows[len(rows) - keep :], True
        return pb.ListEventsResponse(
            items=items,
            next_cursor=self.stores.events.cursor(rows[0]) if rows and has_more else "",
            has_more=has_more,
            max_page_bytes=self.settings.page_max_bytes,
        )
