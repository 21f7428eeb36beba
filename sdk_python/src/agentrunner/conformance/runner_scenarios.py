"""The runner kit's scenarios, in order; each adds its rows to the kit's report (see `runner_kit`)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from agentrunner.conformance import checks
from agentrunner.conformance.runner_kit import (
    CANCEL_GRACE,
    DEADLINE_SECONDS,
    RATE_LIMIT_DELAY,
    RunnerKit,
    Scenario,
    Started,
    _bad_value,
    _closed_port,
)
from agentrunner.errors import (
    AgentRunnerError,
    RateLimitedError,
    RuntimeFailureError,
    RunTokenInvalidError,
    UnauthorizedError,
)
from agentrunner.testing import ControlSession

HEARTBEAT = 0.2
#: A run still going this long after it started must have sent its ControlHello.
HELLO_WITHIN = 1.0
NO_CALLS = "the runner made no proxy call in the normal run, so there is no call to answer with an error"


def _makes_calls(kit: RunnerKit) -> bool:
    return any(s.proxy_calls for s in kit.scenarios if s.name == "normal")


def _ended(scenario: Scenario, limit: float) -> list[str]:
    return (
        [f"no terminal result within {limit:.0f}s (the kit cancelled the call)"] if scenario.timed_out else []
    )


async def normal(kit: RunnerKit) -> None:
    """A normal run: the stream keeps the grammar and matches the capabilities the manifest declares."""
    kit.script_all(None)
    sc = await kit.finish(await kit.start("normal"))
    assert kit.manifest is not None
    problems = checks.grammar(sc.outcome) + _ended(sc, kit.timeout)
    kind = sc.outcome.types[-1] if sc.outcome.results else "nothing"
    kit.report.add(
        "stream.grammar",
        f"run_id, sequence 1..n, timestamps, one terminal, nothing after it (ended with {kind})",
        problems or ([] if sc.outcome.results else ["no results at all"]),
    )
    kit.report.add(
        "stream.capabilities",
        "results match the declared capabilities (no message.delta without streaming)",
        checks.streaming_capability(sc.outcome, kit.manifest.capabilities.streaming),
    )


async def config_invalid(kit: RunnerKit) -> None:
    """A config value that fails the manifest's schema ends the run with runner.config_invalid."""
    assert kit.manifest is not None
    title = "config that fails config_schema ends with run.failed runner.config_invalid naming the field"
    if not kit.manifest.config_schema:
        kit.report.skip("stream.config_invalid", title, "the manifest declares no config_schema")
        return
    field = kit.manifest.config_schema[0]
    kit.script_all(None)
    sc = await kit.finish(await kit.start("config", config={field.name: _bad_value(field)}))
    problems = _ended(sc, kit.timeout) + checks.ended_well(sc.outcome)
    failure = sc.outcome.failure
    if failure is None:
        problems.append(
            f"ended with {sc.outcome.types[-1] if sc.outcome.results else 'nothing'}, not run.failed"
        )
    else:
        if failure.code != "runner.config_invalid":
            problems.append(f"run.failed code {failure.code!r}, expected 'runner.config_invalid'")
        named = failure.details.fields.get("field")
        if named is None or named.string_value != field.name:
            problems.append(f"run.failed details.field does not name {field.name!r}")
    kit.report.add("stream.config_invalid", title, problems)


INJECTED: list[tuple[str, str, AgentRunnerError, float, int]] = [
    (
        "inject.unauthenticated",
        "UNAUTHENTICATED (RUN_TOKEN_INVALID): not retried, the run still ends with a terminal result",
        RunTokenInvalidError("the conformance kit rejects this run token"),
        0.0,
        1,
    ),
    (
        "inject.permission_denied",
        "PERMISSION_DENIED (UNAUTHORIZED): not retried, the run still ends with a terminal result",
        UnauthorizedError("the conformance kit grants nothing"),
        0.0,
        1,
    ),
    (
        "inject.resource_exhausted",
        f"RESOURCE_EXHAUSTED (RATE_LIMITED, RetryInfo {RATE_LIMIT_DELAY:.0f}s): no retry before the delay",
        RateLimitedError("the conformance kit is rate limiting", retry_delay=RATE_LIMIT_DELAY),
        RATE_LIMIT_DELAY - 0.05,
        3,
    ),
    (
        "inject.unavailable",
        "UNAVAILABLE (RUNTIME_ERROR, retryable): retries spaced and bounded, then a terminal result",
        RuntimeFailureError(
            "the conformance kit is unavailable", retryable=True, code=grpc.StatusCode.UNAVAILABLE
        ),
        0.05,
        5,
    ),
]


async def injected_errors(kit: RunnerKit) -> None:
    """The host answers every call with one error: the runner retries only what is retryable, and still
    ends the run with a terminal result."""
    for check_id, title, error, min_gap, attempts in INJECTED:
        if not _makes_calls(kit):
            kit.report.skip(check_id, title, NO_CALLS)
            continue
        kit.script_all(kit.fail_with(error))
        name = check_id.split(".", 1)[1]
        sc = await kit.finish(await kit.start(name))
        problems = checks.retry_etiquette(
            sc.proxy_calls, retryable=error.retryable, min_gap=min_gap, max_attempts=attempts
        )
        problems += checks.calls_after(sc.calls, sc.ended_at)
        problems += _ended(sc, kit.timeout) + checks.ended_well(sc.outcome)
        kit.report.add(check_id, title, checks.short(problems))
    kit.script_all(None)


async def host_dropped(kit: RunnerKit) -> None:
    """A host API endpoint that refuses connections: the run still ends with a terminal result."""
    limit = 10.0
    sc = await kit.finish(await kit.start("dropped", host_api_endpoint=_closed_port()), timeout=limit)
    kit.report.add(
        "host.dropped",
        "a host_api_endpoint that refuses connections: the run still ends with a terminal result",
        _ended(sc, limit) + checks.ended_well(sc.outcome),
    )


async def _first_call(kit: RunnerKit, started: Started, wait: float) -> None:
    """Waits until the run made a proxy call (it is then held) or ended, at most `wait` seconds."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait):
            # Polls the double's call log: a proxy call arrives in another handler task.
            while not any(c.method != "Control" for c in started.calls(kit.host)) and not started.ended:  # noqa: ASYNC110
                await asyncio.sleep(0.02)


CONTROL_CHECKS = [
    "control.hello",
    "control.steering",
    "control.cancel",
    "control.heartbeat",
    "control.closed",
]


async def _control_session(kit: RunnerKit, started: Started) -> ControlSession | None:
    """The run's control session, or None when the run ended first (or 5 s passed)."""
    waiter = asyncio.ensure_future(kit.host.wait_control(started.handle.run_id, timeout=5.0))
    await asyncio.wait({waiter, started.reader}, return_when=asyncio.FIRST_COMPLETED, timeout=5.0)
    if waiter.done() and waiter.exception() is None:
        return waiter.result()
    waiter.cancel()
    with contextlib.suppress(BaseException):
        await waiter
    # The run may have ended just as its hello arrived.
    return kit.host.control_session(started.handle.run_id)


async def cancel(kit: RunnerKit) -> None:
    """The Control stream: hello first, steering acknowledged, a cancel that ends the run, heartbeats at
    the welcome's interval, the stream closed with the run. Skipped when the manifest declares neither
    interrupt nor steering."""
    assert kit.manifest is not None
    caps = kit.manifest.capabilities
    r = kit.report
    if not (caps.interrupt or caps.steering):
        for check_id in CONTROL_CHECKS:
            r.skip(check_id, "Control stream", "the manifest declares neither interrupt nor steering")
        return
    kit.script_all(kit.hold())
    started = await kit.start("cancel")
    session = await _control_session(kit, started)
    if session is None:
        kit._release.set()
        sc = await kit.finish(started)
        quick = sc.ended_at is not None and sc.ended_at - sc.started_at < HELLO_WITHIN
        if quick and not any(c.method == "Control" for c in sc.calls):
            why = f"the run ended within {HELLO_WITHIN:.0f}s, before it opened the Control stream"
            for check_id in CONTROL_CHECKS:
                r.skip(check_id, "Control stream", why)
            return
        r.add(
            "control.hello",
            "opens ProxyService.Control with ControlHello first",
            ["no ControlHello within 5s"],
        )
        for check_id in CONTROL_CHECKS[1:]:
            r.skip(check_id, "Control stream", "no control stream")
        return
    await _first_call(kit, started, 3.0 if _makes_calls(kit) else 0.3)
    r.add("control.hello", "opens ProxyService.Control with ControlHello{run_id, run_token} first", [])
    if caps.steering and not started.ended:
        try:
            sig = await kit.host.steer(started.handle.run_id, "steering from the conformance kit")
            acks = [a for a in session.acks if a.signal_id == sig]
            r.add(
                "control.steering",
                "a SteeringInput is acknowledged (accepted) with its signal_id",
                [] if acks and acks[0].accepted else ["acknowledged as not accepted"],
            )
        except TimeoutError:
            r.add("control.steering", "a SteeringInput is acknowledged", ["no ControlAck within 5s"])
    elif not caps.steering:
        r.skip("control.steering", "steering", "the manifest does not declare steering")
    else:
        r.skip("control.steering", "steering", "the run ended before the signal could be sent")
    await _cancel(kit, started, session)


async def _cancel(kit: RunnerKit, started: Started, session: ControlSession) -> None:
    assert kit.manifest is not None
    r = kit.report
    title = f"CancelSignal (grace {CANCEL_GRACE:.0f}s): acknowledged, run.failed cancelled within the grace"
    sent_at = time.monotonic()
    problems: list[str] = []
    exercised = False
    if not kit.manifest.capabilities.interrupt:
        r.skip("control.cancel", title, "the manifest does not declare interrupt")
    elif started.ended:
        r.skip("control.cancel", title, "the run ended before the cancel could be sent")
    else:
        exercised = True
        try:
            await kit.host.cancel(
                started.handle.run_id, "cancel from the conformance kit", grace=CANCEL_GRACE
            )
        except TimeoutError:
            problems.append("no ControlAck for the CancelSignal within 5s")
    sc = await kit.finish(started, timeout=CANCEL_GRACE + 4.0)
    kit._release.set()
    if exercised:
        problems += checks.ended_well(sc.outcome)
        if not checks.is_failed(sc.outcome.terminal, "cancelled"):
            got = sc.outcome.types[-1] if sc.outcome.results else "nothing"
            problems.append(f"ended with {got}, expected run.failed code 'cancelled'")
        elif sc.ended_at is not None and sc.ended_at - sent_at > CANCEL_GRACE + 1.5:
            problems.append(f"run.failed arrived {sc.ended_at - sent_at:.1f}s after the cancel")
        r.add("control.cancel", title, problems)
    end = session.closed_at or time.monotonic()
    duration = end - session.opened_at
    expected = int(duration / (3 * HEARTBEAT))
    beats = len(session.heartbeat_times)
    r.add(
        "control.heartbeat",
        f"ControlHeartbeat at the welcome's heartbeat_interval ({HEARTBEAT}s)",
        [] if beats >= expected else [f"{beats} heartbeats in {duration:.1f}s"],
    )
    ref = sc.ended_at or time.monotonic()
    # The runner closes its stream after its terminal result: give it the 2 s the check allows.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(session.closed.wait(), timeout=max(0.0, ref + 2.0 - time.monotonic()))
    closed = session.closed_at
    r.add(
        "control.closed",
        "the Control stream is closed when the run ends",
        [] if closed is not None and closed - ref < 2.0 else ["still open 2s after the run ended"],
    )


async def call_cancelled(kit: RunnerKit) -> None:
    """The host cancels the Run call: the runner stops making proxy calls."""
    title = "the host cancels the Run call: the runner stops (no proxy call afterwards)"
    kit.script_all(kit.hold())
    started = await kit.start("call_cancelled")
    await _first_call(kit, started, 3.0 if _makes_calls(kit) else 0.3)
    if started.ended:
        kit._release.set()
        await kit.finish(started)
        kit.report.skip("stream.call_cancelled", title, "the run ended before the kit could cancel it")
        return
    cancelled_at = time.monotonic()
    started.handle.cancel()
    await asyncio.sleep(1.0)
    kit._release.set()
    sc = await kit.finish(started)
    kit.report.add("stream.call_cancelled", title, checks.short(checks.calls_after(sc.calls, cancelled_at)))


async def deadline(kit: RunnerKit) -> None:
    """A run deadline passing while the host holds a call: a terminal result before the deadline."""
    title = f"a run deadline ({DEADLINE_SECONDS:.0f}s) passing while the host holds a call: a terminal result before it"
    if not _makes_calls(kit):
        kit.report.skip("stream.deadline", title, NO_CALLS.replace("answer with an error", "hold"))
        return
    kit.script_all(kit.hold())
    sc = await kit.finish(
        await kit.start("deadline", deadline=DEADLINE_SECONDS), timeout=DEADLINE_SECONDS + 3
    )
    kit._release.set()
    kit.script_all(None)
    problems = []
    if sc.outcome.terminal is None:
        code = sc.outcome.code.name
        problems.append(
            f"no terminal result: the Run call ended with {code} (end with run.failed deadline_exceeded before the deadline)"
        )
    elif sc.ended_at is not None and sc.ended_at > sc.deadline_mono + 0.2:
        problems.append(f"the terminal result came {sc.ended_at - sc.deadline_mono:.2f}s after the deadline")
    if sc.outcome.terminal is not None:
        problems += checks.ended_well(sc.outcome)
    kit.report.add("stream.deadline", title, problems)


def etiquette(kit: RunnerKit) -> None:
    """Token, traceparent and deadline on every proxy call of every scenario; nothing after the end."""
    scenarios = [s for s in kit.scenarios if s.name != "dropped"]
    if not any(s.calls for s in scenarios):
        for check_id in ("proxy.token", "proxy.traceparent", "proxy.deadline", "proxy.after_end"):
            kit.report.skip(check_id, "proxy etiquette", "the runner made no proxy call")
        return
    token, trace, deadline_, after = [], [], [], []
    for s in scenarios:
        token += checks.token_etiquette(s.calls, s.token, s.run_id)
        trace += checks.trace_etiquette(s.calls, s.trace_id)
        deadline_ += checks.deadline_etiquette(s.calls, s.deadline_mono)
        if s.name != "call_cancelled":
            after += [f"{s.name}: {p}" for p in checks.calls_after(s.calls, s.ended_at)]
    r = kit.report
    r.add("proxy.token", "x-agentrunner-run-token on every call (and in ControlHello)", checks.short(token))
    r.add("proxy.traceparent", "a W3C traceparent of the run's trace on every call", checks.short(trace))
    r.add("proxy.deadline", "a gRPC deadline within the run deadline on every call", checks.short(deadline_))
    r.add("proxy.after_end", "no proxy call after the terminal result", checks.short(after))
