"""The host kit's scenarios, in order; each adds its rows to the kit's report (see `host_kit`)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

import grpc

from agentrunner.conformance import checks
from agentrunner.conformance.host_kit import (
    VARIABLES,
    HostKit,
    Outcome,
    answer,
    client_grammar,
    expect,
    ledger,
)
from agentrunner.conformance.host_runner import RUNNER_ID
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2

S = common_pb2
DELTA, DONE, FAILED = "message.delta", "run.completed", "run.failed"
TOKEN = (grpc.StatusCode.UNAUTHENTICATED, ("RUN_TOKEN_INVALID",))
DENIED = (grpc.StatusCode.PERMISSION_DENIED, ("UNAUTHORIZED",))

#: (check id, rule, runner behaviour, expected status, reason, result types the client sees)
STREAMS: list[tuple[str, str, str, int, str, list[str] | None]] = [
    (
        "host.well_behaved",
        "a well-behaved stream reaches the client in order and completes",
        "well_behaved",
        S.RUN_STATUS_COMPLETED,
        "",
        [DELTA, DELTA, DONE],
    ),
    (
        "host.wrong_run_id",
        "a result with another run_id is dropped",
        "wrong_run_id",
        S.RUN_STATUS_COMPLETED,
        "",
        [DELTA, DONE],
    ),
    (
        "host.sequence_backwards",
        "a sequence going backwards (a repeat) is dropped",
        "sequence_backwards",
        S.RUN_STATUS_COMPLETED,
        "",
        [DELTA, DELTA, DONE],
    ),
    (
        "host.two_terminals",
        "a second terminal result is dropped; the first one stands",
        "two_terminals",
        S.RUN_STATUS_COMPLETED,
        "",
        [DONE],
    ),
    (
        "host.after_terminal",
        "results after the terminal result are dropped",
        "after_terminal",
        S.RUN_STATUS_COMPLETED,
        "",
        [DONE],
    ),
    (
        "host.oversized",
        "a result over the size cap (1 MiB) is dropped, the run goes on",
        "oversized",
        S.RUN_STATUS_COMPLETED,
        "",
        [DONE],
    ),
    (
        "host.unknown_payload",
        "a result type the host does not know is ignored",
        "unknown_payload",
        S.RUN_STATUS_COMPLETED,
        "",
        [DONE],
    ),
    (
        "host.invalid_payload",
        "an invalid payload (state.updated without scope) is dropped",
        "invalid_payload",
        S.RUN_STATUS_COMPLETED,
        "",
        [DONE],
    ),
    (
        "host.garbage",
        "bytes that are not a RunResponse fail the run: runner.protocol_error",
        "garbage",
        S.RUN_STATUS_FAILED,
        "runner.protocol_error",
        [FAILED],
    ),
    (
        "host.no_terminal",
        "a stream that ends without a terminal fails: runner.no_terminal",
        "no_terminal",
        S.RUN_STATUS_FAILED,
        "runner.no_terminal",
        [DELTA, FAILED],
    ),
    (
        "host.empty_output",
        "run.completed without any output fails: runner.empty_output",
        "empty",
        S.RUN_STATUS_FAILED,
        "runner.empty_output",
        [FAILED],
    ),
    (
        "host.dies",
        "a runner dying mid-stream fails the run: runner.stream_broken",
        "dies",
        S.RUN_STATUS_FAILED,
        "runner.stream_broken",
        [DELTA, FAILED],
    ),
]


async def streams(kit: HostKit) -> None:
    """The stream rules: each runner behaviour of `STREAMS` reaches the client as the contract says."""
    for check_id, rule, behaviour, status, reason, types in STREAMS:
        out = await kit.event(behaviour)
        code = (reason or None) if status == S.RUN_STATUS_FAILED else None
        kit.report.add(check_id, rule, expect(out, status, reason=reason, types=types, terminal_code=code))


async def context(kit: HostKit) -> None:
    """The run context the runner receives: ids, protocol version, trace, deadline, event-first input, and
    no sensitive request variable."""
    out = await kit.event("context", variables=VARIABLES)
    seen, problems = out.seen, expect(out, S.RUN_STATUS_COMPLETED)
    if seen is None or out.accepted is None:
        kit.report.add("host.context", "the run context", problems or ["the runner was never called"])
        return
    req, ctx = seen.request, seen.request.context
    if req.runner_id != RUNNER_ID:
        problems.append(f"RunRequest.runner_id {req.runner_id!r}")
    if (
        ctx.run_id != out.accepted.run_id
        or not ctx.event.event_id
        or ctx.event.event_type != "message.received"
    ):
        problems.append("run_id / event id / event type do not match the event")
    if ctx.runtime.protocol_version != "1":
        problems.append(f"runtime.protocol_version {ctx.runtime.protocol_version!r}")
    if (
        not re.fullmatch(r"[0-9a-f]{32}", ctx.runtime.trace_id)
        or ctx.runtime.trace_id != out.accepted.trace_id
    ):
        problems.append("runtime.trace_id is not the run's W3C trace id")
    if (
        not ctx.runtime.HasField("deadline_at")
        or ctx.runtime.deadline_at.ToNanoseconds() / 1e9 <= time.time()
    ):
        problems.append("runtime.deadline_at is not set in the future")
    if ctx.context.inline_policy.mode != context_pb2.INLINE_MODE_CURRENT_EVENT:
        problems.append("history is inlined (inline_policy is not CURRENT_EVENT)")
    if ctx.input.text != "context":
        problems.append("the input text did not arrive")
    if len(req.run_token) < 22 or not req.host_api_endpoint:
        problems.append("no run token of at least 128 bits, or no host_api_endpoint")
    kit.report.add(
        "host.context", "the run context: ids, protocol version, trace, deadline, event-first input", problems
    )
    from agentrunner.conformance.host_kit import filtered_variables

    kit.report.add(
        "host.variables",
        "sensitive request variables never reach the runner (api_key, _private, X-Auth-Token)",
        filtered_variables(seen),
    )


async def unknown_agent(kit: HostKit) -> None:
    """An event for an agent the host does not know: NOT_FOUND with one ErrorInfo."""
    request = host_service_pb2.HostServiceRunRequest(
        event=kit.envelope("well_behaved"), agent_id="conformance-no-such-agent"
    )
    error = None
    try:
        async for _ in kit.stub.Run(request, timeout=10):
            pass
    except grpc.RpcError as exc:
        error = exc
    problems = checks.rich_error(error, grpc.StatusCode.NOT_FOUND, ("NOT_FOUND", "BINDING_NOT_FOUND"))
    kit.report.add(
        "host.unknown_agent", "an event for an unknown agent: NOT_FOUND with one ErrorInfo", problems
    )


async def probes(kit: HostKit) -> None:
    """The host's answers to the runner's probe calls: a granted call succeeds; forged tokens, other runs'
    ids and ungranted resources are refused with the contract's codes; Control says welcome."""
    out = await kit.event("probes")
    seen, r = out.seen, kit.report
    r.add("host.proxy_granted", "a granted call with the run token succeeds", answer_ok(seen))
    auth = []
    for label in ("no_token", "bad_token", "other_run", "control_forged"):
        auth += answer(seen, label, *TOKEN)
    r.add(
        "host.proxy_auth",
        "a missing or forged token, or another run's id: UNAUTHENTICATED RUN_TOKEN_INVALID",
        auth,
    )
    denied = answer(seen, "ungranted_tool", *DENIED) + answer(seen, "ungranted_scope", *DENIED)
    r.add(
        "host.proxy_ungranted",
        "a tool or state scope not granted to the run: PERMISSION_DENIED UNAUTHORIZED",
        denied,
    )
    welcome = seen.welcome if seen else None
    problems = []
    if welcome is None:
        problems.append("no ControlWelcome after a valid ControlHello")
    elif not welcome.HasField("heartbeat_interval") or welcome.heartbeat_interval.ToNanoseconds() <= 0:
        problems.append("ControlWelcome has no heartbeat_interval")
    elif not welcome.HasField("deadline_at"):
        problems.append("ControlWelcome has no deadline_at")
    r.add(
        "host.control_welcome",
        "ControlHello is answered with ControlWelcome{deadline_at, heartbeat_interval}",
        problems,
    )
    if seen is None or out.finished is None:
        r.add("host.token_replay", "the run token dies with the run", ["the probing run did not finish"])
        return
    error = await kit.replay(seen)
    r.add(
        "host.token_replay",
        "a token replayed after its run ended: UNAUTHENTICATED RUN_TOKEN_INVALID",
        checks.rich_error(error, grpc.StatusCode.UNAUTHENTICATED, "RUN_TOKEN_INVALID"),
    )


def answer_ok(seen: object) -> list[str]:
    """The runner's granted call succeeded (ListHistory with its own token)."""
    from agentrunner.conformance.host_runner import Seen

    if not isinstance(seen, Seen) or "granted" not in seen.answers:
        return ["the runner's granted call did not happen"]
    code = seen.answers["granted"].code
    return [] if code == grpc.StatusCode.OK else [f"ListHistory with the run's token answered {code.name}"]


def _canceller(kit: HostKit, text: str, sent: dict[str, float]) -> Callable[[Outcome], Awaitable[None]]:
    async def during(out: Outcome) -> None:
        assert out.accepted is not None
        async with asyncio.timeout(10):
            await kit.runner.arrived[text].wait()
            await kit.runner.seen[text].waiting.wait()
        sent["at"] = asyncio.get_running_loop().time()
        await kit.stub.CancelRun(
            host_service_pb2.CancelRunRequest(run_id=out.accepted.run_id, reason="conformance"), timeout=10
        )

    return during


async def cancel(kit: HostKit) -> None:
    """CancelRun reaches the runner as a CancelSignal with a grace period; the run ends CANCELLED."""
    sent: dict[str, float] = {}
    out = await kit.event("cancel", during=_canceller(kit, "cancel", sent))
    problems = expect(out, S.RUN_STATUS_CANCELLED)
    signals = [s for s in (out.seen.signals if out.seen else []) if s.WhichOneof("signal") == "cancel"]
    if not signals:
        problems.append("the runner got no CancelSignal on its Control stream")
    elif not signals[0].signal_id or signals[0].cancel.grace_period.ToNanoseconds() <= 0:
        problems.append("the CancelSignal has no signal_id or no grace_period")
    kit.report.add("host.cancel", "CancelRun: a CancelSignal with a grace period, then CANCELLED", problems)
    sent.clear()
    out = await kit.event("ignores_cancel", during=_canceller(kit, "ignores_cancel", sent))
    problems = expect(out, S.RUN_STATUS_CANCELLED)
    seen = out.seen
    if seen is None or not seen.call_cancelled.is_set():
        problems.append("the runner's Run call was not cancelled after the grace period")
    elif "at" in sent and seen.cancelled_at is not None and seen.cancelled_at - sent["at"] > 10:
        problems.append(f"the Run call was cancelled {seen.cancelled_at - sent['at']:.1f}s after CancelRun")
    kit.report.add(
        "host.cancel_ignored",
        "a runner ignoring the cancel: its Run call is cancelled after the grace",
        problems,
    )


async def deadline(kit: HostKit) -> None:
    """A runner that never ends is stopped at the agent's deadline: TIMEOUT, and its call cancelled.
    Skipped without `--deadline-agent`."""
    rule = "a runner that never ends: TIMEOUT (deadline_exceeded) at the agent's deadline, its call cancelled"
    if not kit.deadline_agent:
        kit.report.skip(
            "host.deadline", rule, "no --deadline-agent (an agent with a short timeout) was given"
        )
        return
    out = await kit.event("never_ends", agent=kit.deadline_agent)
    problems = expect(out, S.RUN_STATUS_TIMEOUT, reason="deadline_exceeded")
    if out.seen is not None and not out.seen.call_cancelled.is_set():
        problems.append("the runner's Run call was not cancelled at the deadline")
    kit.report.add("host.deadline", rule, problems)


def aggregate(kit: HostKit) -> None:
    """The rules over every run the kit made: clients see one run id and 1..n; GetRun agrees."""
    grammar, records = [], []
    for text, out in kit.outcomes.items():
        grammar += [f"{text}: {p}" for p in client_grammar(out)]
        records += [f"{text}: {p}" for p in ledger(out)]
    kit.report.add(
        "host.client_grammar",
        "clients see the run's id and a contiguous sequence 1..n",
        checks.short(grammar),
    )
    kit.report.add("host.ledger", "GetRun reports the status the stream finished with", checks.short(records))


async def _aggregate(kit: HostKit) -> None:
    aggregate(kit)


STEPS = [streams, context, unknown_agent, probes, cancel, deadline, _aggregate]
