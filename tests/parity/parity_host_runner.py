"""An SDK runner for the host parity suite (issue 8 phase 2), served as its own process with
`python -m agentrunner serve tests.parity.parity_host_runner:ParityHostRunner --port 0`.

The event text names a scenario, optionally followed by a JSON object of arguments (`"form {...}"`);
`interaction.submitted` events run the `answer` scenario. Reports go into `run.completed`: as the message
(JSON) where the transcript does not matter, else as result metadata `report`, so a scenario that
answers through `ctx.reply` has no completed message of its own.
"""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format

from agentrunner import RunContext, Runner, interactions, results
from agentrunner.errors import AgentRunnerError
from agentrunner.results import RunResult
from agentrunner.v1 import common_pb2, proxy_service_pb2, result_pb2

P = proxy_service_pb2


async def _reason(coro: Any) -> str:
    try:
        await coro
    except AgentRunnerError as exc:
        return exc.reason
    return "OK"


def _raw_interaction(ctx: RunContext, request: common_pb2.InteractionRequest) -> RunResult:
    return result_pb2.RunResult(
        run_id=ctx.run_id, interaction_requested=result_pb2.InteractionRequested(interaction=request)
    )


def _big_request(kind: str, iid: str) -> common_pb2.InteractionRequest:
    req = common_pb2.InteractionRequest(
        interaction_id=iid, kind=common_pb2.INTERACTION_KIND_FORM, title="Too much", fallback_text="too much"
    )
    if kind == "fields":
        for i in range(51):
            req.fields.add(id=f"f{i}", label=f"F{i}", type=common_pb2.INTERACTION_FIELD_TYPE_TEXT)
    elif kind == "actions":
        for i in range(21):
            req.actions.add(id=f"a{i}", label=f"A{i}")
    elif kind == "bytes":
        req.description = "x" * 9000
        for i in range(40):
            req.fields.add(
                id=f"f{i}",
                label="L" * 500,
                type=common_pb2.INTERACTION_FIELD_TYPE_TEXT,
                placeholder="p" * 1000,
            )
            req.fields[i].default_value.string_value = "d" * 6000
    elif kind == "expiry":
        req.expires_at.FromDatetime(dt.datetime.now(dt.UTC) + dt.timedelta(hours=25))
    return req


class ParityHostRunner(Runner):
    manifest = {
        "id": "plugin:test/parity-host/default",
        "label": "parity host",
        "capabilities": ["streaming", "tool_calling", "interactions", "platform_api"],
        "permissions": {
            "tools": ["detail", "call"],
            "history": ["page"],
            "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
            "platform_api": ["send_message", "group.mute", "group.kick"],
        },
        "config": [{"name": "upstream", "type": "secret", "label": "Upstream credential"}],
    }

    async def run(self, ctx: RunContext) -> AsyncIterator[RunResult]:
        if ctx.event.event_type == "interaction.submitted":
            scenario, args = "answer", dict[str, Any]()
        else:
            scenario, _, rest = ctx.input.to_text().partition(" ")
            args = json.loads(rest) if rest.strip() else {}
        handler = getattr(self, f"s_{scenario}")
        async for item in handler(ctx, args):
            yield item

    # -- replies ----------------------------------------------------------------------------------

    async def s_reply(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        resp = await ctx.reply(args.get("text", "hi"))
        yield results.completed(metadata={"report": {"delivered": resp.delivered}})

    async def s_stream(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        delivered: list[bool | None] = []
        async with ctx.reply_stream() as s:
            for text in ("Hel", "Hello, wor", "Hello, world"):
                delivered.append((await s.update(text)).delivered)
                await asyncio.sleep(0.05)
        delivered.append(s.result.delivered if s.result else None)
        yield results.completed(metadata={"report": {"delivered": delivered}})

    async def s_stream_raise(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        async with ctx.reply_stream() as s:
            await s.update("partial")
            raise RuntimeError("model broke")
        yield results.completed()  # type: ignore[unreachable]  # pragma: no cover (the yield makes this an async generator)

    async def s_reply_errors(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        msg = common_pb2.AssistantMessage(content="one")
        full = P.SendReplyRequest(reply_id="r1", mode=common_pb2.REPLY_MODE_FULL, message=msg)
        update = P.SendReplyRequest(reply_id="r1", mode=common_pb2.REPLY_MODE_UPDATE, message=msg)
        report = {
            "first": await _reason(ctx.api.call("SendReply", full)),
            "again": await _reason(ctx.api.call("SendReply", full)),
            "update_after_finish": await _reason(ctx.api.call("SendReply", update)),
            "no_mode": await _reason(
                ctx.api.call("SendReply", P.SendReplyRequest(reply_id="r2", message=msg))
            ),
            "too_big": await _reason(
                ctx.api.call(
                    "SendReply",
                    P.SendReplyRequest(
                        reply_id="r3",
                        mode=common_pb2.REPLY_MODE_FULL,
                        message=common_pb2.AssistantMessage(content="x" * 200_001),
                    ),
                )
            ),
        }
        yield results.completed(json.dumps(report))

    async def s_raw_reply(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        req = P.SendReplyRequest(
            reply_id="r1", mode=common_pb2.REPLY_MODE_FULL, message=common_pb2.AssistantMessage(content="x")
        )
        report = {
            "reply_api": ctx.raw.context.available_apis.reply,
            "outcome": await _reason(ctx.api.call("SendReply", req)),
        }
        yield results.completed(json.dumps(report))

    # -- logs and tools ---------------------------------------------------------------------------

    async def s_log(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        await ctx.log("starting", step=1)
        await ctx.log("careful now", level="warning")
        await ctx.log("L" * 12_000, level="debug")
        yield results.completed("logged")

    async def s_tool(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        response = await ctx.call_tool("current_time", {})
        yield results.completed(json.dumps({"is_error": response.is_error}))

    # -- interactions -----------------------------------------------------------------------------

    async def s_form(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        await ctx.request_form(
            "Deploy settings",
            [
                interactions.field(
                    "env", "Environment", "select", required=True, options=["staging", "prod"]
                ),
                interactions.field("replicas", "Replicas", "number"),
                interactions.field("notes", "Notes", "textarea"),
                interactions.field("tags", "Tags", "multiselect", options=["a", "b", "c"]),
                interactions.field("force", "Force", "boolean"),
            ],
            actions=[("deploy", "Deploy", "primary"), ("cancel", "Cancel")],
            expires_in=args.get("expires_in"),
            interaction_id=args.get("id"),
        )
        yield results.completed()  # the interaction is the run's output

    async def s_confirm(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        await ctx.request_confirmation("Really?", interaction_id=args.get("id"))
        yield results.completed()

    async def s_answer(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        typed: Any = ctx.platform_event  # an InteractionSubmittedEvent for this event type
        report = {
            "event_type": ctx.event.event_type,
            "interaction": json_format.MessageToDict(ctx.input.interaction)
            if ctx.input.interaction
            else None,
            "values": ctx.input.interaction_values,
            "typed": type(typed).__name__,
            "submission_id": typed.submission.interaction_id if typed is not None else "",
            "subject": ctx.raw.subject.subject_id,
            "actor": ctx.raw.actor.actor_id,
        }
        yield results.completed(json.dumps(report))

    async def s_raw_interactions(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        for kind in ("fields", "actions", "bytes", "expiry"):
            await ctx.emit(_raw_interaction(ctx, _big_request(kind, f"{args['prefix']}-{kind}")))
        await ctx.log("still running")
        yield results.completed("continued")

    # -- run records ------------------------------------------------------------------------------

    async def s_runs(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        other = args.get("other", "")
        me = await ctx.runs.get()
        listed = await ctx.runs.list()
        events = await ctx.runs.events(other) if other else None
        cancelled = await ctx.runs.cancel(other) if other else None
        log_result = results.log("appended line")
        append = await _reason(ctx.api.call("AppendRunResult", P.AppendRunResultRequest(result=log_result)))
        finalize = await _reason(
            ctx.api.call(
                "FinalizeRunRecord",
                P.FinalizeRunRecordRequest(run_id=other, status=common_pb2.RUN_STATUS_COMPLETED, reason="x"),
            )
        )
        report = {
            "me": me.run_id,
            "status": common_pb2.RunStatus.Name(me.status),
            "listed": [r.run_id for r in listed.runs],
            "events": [r.WhichOneof("payload") for r in events.results] if events else [],
            "cancelled": common_pb2.RunStatus.Name(cancelled.status) if cancelled else "",
            "append": append,
            "finalize": finalize,
            "apis": {
                "append": ctx.raw.context.available_apis.run_append_result,
                "finalize": ctx.raw.context.available_apis.run_finalize,
            },
        }
        yield results.completed(json.dumps(report))

    # -- platform ---------------------------------------------------------------------------------

    async def s_platform(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        def action(name: str, bot_id: str = "") -> Any:
            return ctx.api.call(
                "RequestPlatformAction", P.RequestPlatformActionRequest(action=name, bot_id=bot_id)
            )

        sent = await ctx.send_message("conversation", args["target"], "hello there", idempotency_key="k1")
        again = await ctx.send_message("conversation", args["target"], "hello there", idempotency_key="k1")
        report = {
            "resources": list(ctx.raw.resources.platform_actions),
            "kick": await _reason(action("group.kick")),
            "mute": await _reason(action("group.mute")),
            "other_bot": await _reason(action("send_message", bot_id="someone-else")),
            "person": await _reason(
                ctx.api.call(
                    "SendMessage",
                    P.SendMessageRequest(
                        target_type="person", target_id="u1", message=common_pb2.AssistantMessage(content="x")
                    ),
                )
            ),
            "sent": [sent.delivered, sent.platform_message_id],
            "again": [again.delivered, again.platform_message_id],
        }
        yield results.completed(json.dumps(report))

    async def s_history(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        page = await ctx.api.call(
            "ListHistory", P.ListHistoryRequest(limit=100, direction=P.PAGE_DIRECTION_FORWARD)
        )
        items = [
            {
                "role": i.role,
                "content": i.content,
                "run_id": i.run_id,
                "metadata": json_format.MessageToDict(i.metadata),
            }
            for i in page.items
        ]
        yield results.completed("history", metadata={"report": {"items": items}})

    # -- context ----------------------------------------------------------------------------------

    async def s_context(self, ctx: RunContext, args: dict[str, Any]) -> AsyncIterator[RunResult]:
        typed = ctx.platform_event
        report = {
            "variables": ctx.variables,
            "typed": type(typed).__name__ if typed is not None else None,
            "typed_text": getattr(typed, "text", None),
            "typed_chat_id": getattr(typed, "chat_id", None),
            "host_set": bool(ctx.raw.event.platform_event.WhichOneof("event")),
            "bot_id": ctx.raw.event.platform_event.bot_id,
            "automatic_reply": ctx.raw.delivery.automatic_reply,
            "reply_api": ctx.raw.context.available_apis.reply,
            "skills": [s.skill_name for s in ctx.raw.resources.skills],
        }
        yield results.completed(json.dumps(report))
