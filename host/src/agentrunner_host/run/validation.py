"""Validation of a runner's result stream (PROTOCOL_V1 §7), transport-neutral.

`ResultValidator.accept` takes each result as the runner sent it and returns what it decided: the kind
the result is accepted as (its payload field; the result is renumbered and, where the boundary rules
require it, repaired in place), or None to drop it (with a warning and a metric). Accepted results are
renumbered with the host's own contiguous sequence, so the ledger and every client see 1, 2, 3, ...
whatever the runner's numbering. Which result is the run's terminal is the run's decision
(`run/execution.py:RunExecution.take`), not the validator's: the pump drops what comes after it
(`reject`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Callable

import structlog
from google.protobuf import json_format

from agentrunner import interactions
from agentrunner.errors import AgentRunnerError
from agentrunner.protocol import (
    INTERACTION_DEFAULT_TTL_SECONDS,
    RESULT_TYPES,
    RUN_LOG_MAX_CHARS,
    TERMINAL_PAYLOADS,
)
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.auth.authz import STATE_SCOPE_NAMES
from agentrunner_host.observability.telemetry import RESULTS, RESULTS_REJECTED
from agentrunner_host.ports import AuthorizationSnapshot, state_identity
from agentrunner_host.store.artifacts import check_http_uri
from agentrunner_host.wire.boundary import ID_MAX_CHARS, timestamp_in_range
from agentrunner_host.wire.repair import repair_message

log = structlog.get_logger("agentrunner_host.run.validation")

#: the per-type counter children, resolved once (`labels()` costs more than the rest of `accept`)
_RESULT_COUNTERS = {kind: RESULTS.labels(name) for kind, name in RESULT_TYPES.items()}
_DELTA_COUNTER = _RESULT_COUNTERS["message_delta"]
#: kinds up to this one are the answer (`MESSAGE_KIND_UNSPECIFIED` reads as answer); reasoning and
#: progress are kept in the ledger but are not output
_ANSWER = common_pb2.MESSAGE_KIND_ANSWER
#: accepted `message.delta` results are added to the results counter this many at a time (and at the end)
DELTA_METRIC_BATCH = 64


def _artifact_problem(created: result_pb2.ArtifactCreated) -> str | None:
    """The artifact store's rules (`ArtifactStore.register_created`), checked before the result is
    numbered: a result the store would refuse is dropped here, never a failed write that ends the run
    `host.store_error` with a gap in its ledger."""
    ref = created.artifact
    if not created.HasField("artifact"):
        return "invalid_artifact"
    if created.content:
        if ref.sha256 and ref.sha256.lower() != hashlib.sha256(created.content).hexdigest():
            return "invalid_artifact"
        return None
    if not ref.uri:  # neither a body nor a reference: nothing to store
        return "invalid_artifact"
    try:
        check_http_uri(ref.uri)
    except AgentRunnerError:
        return "invalid_artifact"
    return None


@dataclasses.dataclass(slots=True)
class Limits:
    result_max_bytes: int = 1024 * 1024
    state_key_max_chars: int = 256
    state_value_max_bytes: int = 64 * 1024


def _plain_delta(result: result_pb2.RunResult) -> bool:
    """A delta of plain text with nothing the boundary rules could object to (most results: checked
    without the general walk of `repair_message`)."""
    delta = result.message_delta
    return (
        "\x00" not in delta.text
        and len(delta.message_id) <= ID_MAX_CHARS
        and "\x00" not in delta.message_id
        and not delta.contents
        and not delta.HasField("cumulative_text")
        and not delta.HasField("metadata")
        and not result.HasField("usage")
        and not result.HasField("metadata")
        and timestamp_in_range(result.timestamp)
    )


class ResultValidator:
    def __init__(self, snapshot: AuthorizationSnapshot, limits: Limits) -> None:
        self.snapshot = snapshot
        self.run_id = snapshot.run_id
        self.limits = limits
        self.saw_message = False
        self.host_sequence = 0
        #: the runner's highest sequence so far, and the ranges below it it skipped (`[low, high]`: still
        #: welcome, once); memory grows with the gaps, not with the results
        self._max_runner_seq = 0
        self._gaps: list[list[int]] = []
        #: text streamed so far per message id, as parts (joined only when a delta carries
        #: `cumulative_text`: appending to one string per delta would copy the whole text every time)
        self._buffers: dict[str, list[str]] = {}
        #: tool calls started and not completed; made by the first start (most runs call no tool, and an
        #: empty set is ~0.2 KiB per open run, issue 37)
        self._open_tools: set[str] | None = None
        self._unreported_deltas = 0
        self.dropped = 0
        #: the run's `delivery.interactions` (None: the surface renders none); set once the context is built
        self.interaction_capabilities: common_pb2.InteractionCapabilities | None = None

    def reject(self, reason: str, result: result_pb2.RunResult, **extra: object) -> None:
        """Drops a result (a warning and a metric with `reason`)."""
        self.dropped += 1
        RESULTS_REJECTED.labels(reason).inc()
        log.warning(
            "result.dropped",
            reason=reason,
            run_id=self.run_id,
            sequence=result.sequence,
            type=RESULT_TYPES.get(result.WhichOneof("payload") or "", "unknown"),
            **extra,
        )

    def retract(self, result: result_pb2.RunResult) -> None:
        """Undoes `accept` of the result just accepted (the host refused it afterwards, e.g. an interaction
        id already taken): its sequence is reused, so the stream stays contiguous."""
        if result.sequence == self.host_sequence:
            self.host_sequence -= 1
        self.reject("refused_by_host", result)

    def next_sequence(self) -> int:
        self.host_sequence += 1
        return self.host_sequence

    def accept(self, result: result_pb2.RunResult) -> str | None:
        """The kind `result` is accepted as (renumbered, repaired in place), or None: dropped.

        A `message.delta` (most results) is taken here without the general dispatch: its sequence in
        order, its size, its text plain (`_plain_delta`) is all it is checked for on the usual path."""
        if result.run_id != self.run_id:
            self.reject("wrong_run_id", result, got=result.run_id[:64])
            return None
        seq = result.sequence
        if seq == self._max_runner_seq + 1:  # in order (the usual case): cannot be a duplicate
            self._max_runner_seq = seq
        elif seq and not self._out_of_order(seq):
            self.reject("duplicate_sequence", result)
            return None
        size = result.ByteSize()
        if size > self.limits.result_max_bytes:
            self.reject("oversize", result, size=size, cap=self.limits.result_max_bytes)
            return None
        kind = result.WhichOneof("payload")
        if kind == "message_delta":
            if not _plain_delta(result) and not self._storable(result):
                return None
            self._take_delta(result.message_delta)
            self.host_sequence += 1
            result.sequence = self.host_sequence
            # counted in batches (a labelled counter's lock costs more than the rest of a delta's checks)
            self._unreported_deltas += 1
            if self._unreported_deltas >= DELTA_METRIC_BATCH:
                self.report_metrics()
            return kind
        if not self._storable(result):
            return None
        return self._accept_payload(kind, result)

    def _out_of_order(self, seq: int) -> bool:
        """A runner sequence other than the next one: True for one ahead (the skipped ones are kept as a
        gap) or one filling an earlier gap; False for a duplicate."""
        last = self._max_runner_seq
        if seq > last:
            log.warning("result.sequence_gap", run_id=self.run_id, expected=last + 1, got=seq)
            self._gaps.append([last + 1, seq - 1])
            self._max_runner_seq = seq
            return True
        return self._fill_gap(seq)

    def _storable(self, result: result_pb2.RunResult) -> bool:
        """The boundary rules (no NaN, no NUL, ...): repairs in place what it can (with a warning);
        False, and the result dropped, when something is left that cannot be stored."""
        repaired, left = repair_message(result)
        if left:
            self.reject("unstorable", result, field=left[0][0], problem=left[0][1])
            return False
        if repaired:
            log.warning(
                "result.repaired",
                run_id=self.run_id,
                fields=[f for f, _ in repaired[:5]],
                count=len(repaired),
            )
        return True

    def _take_delta(self, delta: result_pb2.MessageDelta) -> None:
        """A delta's text joins its message's buffer; answer text (or contents) is output."""
        if delta.HasField("cumulative_text"):
            self._take_cumulative(delta)
            return
        text = delta.text
        if text:
            parts = self._buffers.get(delta.message_id)
            if parts is None:
                self._buffers[delta.message_id] = [text]
            else:
                parts.append(text)
            if delta.kind <= _ANSWER:  # reasoning / progress is not output (grammar rule 7)
                self.saw_message = True
        elif delta.contents and delta.kind <= _ANSWER:
            self.saw_message = True

    def _accept_payload(self, kind: str | None, result: result_pb2.RunResult) -> str | None:
        """Every payload but `message.delta`: unknown ones dropped, the rest by their kind's check."""
        if kind is None:
            # A payload from a newer protocol revision (or none at all): ignored (PROTOCOL_V1 §3).
            self.reject("unknown_type", result)
            return None
        problem = self._check_payload(kind, result)
        if problem:
            self.reject(problem, result)
            return None
        result.sequence = self.next_sequence()
        _RESULT_COUNTERS[kind].inc()
        if kind in TERMINAL_PAYLOADS:
            self.report_metrics()
        return kind

    def _fill_gap(self, seq: int) -> bool:
        """A sequence below the highest one: True (and no longer missing) if it was skipped before."""
        for i, (low, high) in enumerate(self._gaps):
            if low <= seq <= high:
                log.warning("result.sequence_late", run_id=self.run_id, got=seq)
                if low == high:
                    del self._gaps[i]
                elif seq == low:
                    self._gaps[i][0] = seq + 1
                elif seq == high:
                    self._gaps[i][1] = seq - 1
                else:
                    self._gaps[i : i + 1] = [[low, seq - 1], [seq + 1, high]]
                return True
        return False

    def report_metrics(self) -> None:
        """Adds the deltas accepted since the last report to the results counter (the run
        calls it when the run ends, whatever way it ends)."""
        if self._unreported_deltas:
            _DELTA_COUNTER.inc(self._unreported_deltas)
            self._unreported_deltas = 0

    def _take_cumulative(self, delta: result_pb2.MessageDelta) -> None:
        """A delta with `cumulative_text`: it becomes its message's text so far, and a delta without text
        of its own is given the increment."""
        parts = self._buffers.setdefault(delta.message_id, [])
        buf = "".join(parts)
        cumulative = delta.cumulative_text
        if not delta.text and cumulative.startswith(buf):
            delta.text = cumulative[len(buf) :]
        elif buf + delta.text != cumulative:
            log.warning("result.delta_cumulative_mismatch", run_id=self.run_id, message_id=delta.message_id)
        parts[:] = [cumulative]
        if (delta.text or delta.contents or cumulative) and delta.kind <= _ANSWER:
            self.saw_message = True

    def _check_payload(self, kind: str, result: result_pb2.RunResult) -> str | None:
        """Every payload but `message.delta` (checked in `accept`): its kind's check (`_CHECKS`); the
        reason to drop it, or None."""
        check = _CHECKS.get(kind)
        return check(self, result) if check is not None else None

    def _message_completed(self, result: result_pb2.RunResult) -> str | None:
        msg = result.message_completed.message
        if not result.message_completed.HasField("message"):
            return "invalid_message_completed"
        if (msg.content or msg.contents or msg.artifacts) and msg.kind <= _ANSWER:
            self.saw_message = True
        return None

    def _tool_call_started(self, result: result_pb2.RunResult) -> str | None:
        p = result.tool_call_started
        if not p.tool_call_id or not p.tool_name:
            return "invalid_tool_call_started"
        if self._open_tools is None:
            self._open_tools = set()
        self._open_tools.add(p.tool_call_id)
        return None

    def _tool_call_completed(self, result: result_pb2.RunResult) -> str | None:
        done = result.tool_call_completed
        if not done.tool_call_id:
            return "invalid_tool_call_completed"
        if self._open_tools is None or done.tool_call_id not in self._open_tools:
            log.warning("result.tool_call_unmatched", run_id=self.run_id, tool_call_id=done.tool_call_id)
        else:
            self._open_tools.discard(done.tool_call_id)
        return None

    def _state_updated(self, result: result_pb2.RunResult) -> str | None:
        s = result.state_updated
        scope = STATE_SCOPE_NAMES.get(s.scope)
        if scope is None or scope not in self.snapshot.state_scopes:
            return "state_scope_denied"
        if not state_identity(self.snapshot, scope):  # e.g. conversation state, no conversation
            return "state_scope_no_identity"
        if not s.key or len(s.key) > self.limits.state_key_max_chars:
            return "state_key_invalid"
        if not s.HasField("value"):
            return "state_value_missing"
        encoded = json.dumps(json_format.MessageToDict(s.value), separators=(",", ":"))
        if len(encoded.encode()) > self.limits.state_value_max_bytes:
            return "state_value_too_large"
        return None

    def _action_requested(self, result: result_pb2.RunResult) -> str | None:
        action = result.action_requested
        if not action.action:
            return "invalid_action"
        # Telemetry only in v1: recorded, never executed.
        log.info(
            "result.action_requested",
            run_id=self.run_id,
            action=action.action,
            idempotency_key=action.idempotency_key,
            executed=False,
        )
        return None

    def _run_completed(self, result: result_pb2.RunResult) -> str | None:
        m = result.run_completed.message
        if (m.content or m.contents or m.artifacts) and m.kind <= _ANSWER:
            self.saw_message = True
        return None


def _run_failed(validator: ResultValidator, result: result_pb2.RunResult) -> str | None:
    if not result.run_failed.code:
        result.run_failed.code = "runner.error"
    return None


#: the check of each payload kind but `message.delta` (a kind without one is accepted as it is)
_CHECKS: dict[str, Callable[[ResultValidator, result_pb2.RunResult], str | None]] = {
    "message_completed": ResultValidator._message_completed,
    "tool_call_started": ResultValidator._tool_call_started,
    "tool_call_completed": ResultValidator._tool_call_completed,
    "artifact_created": lambda v, result: _artifact_problem(result.artifact_created),
    "state_updated": ResultValidator._state_updated,
    "action_requested": ResultValidator._action_requested,
    "run_failed": _run_failed,
    "run_log": lambda v, result: _check_run_log(result, v.limits),
    "interaction_requested": lambda v, result: _check_interaction(
        result, v.interaction_capabilities, v.run_id
    ),
    "run_completed": ResultValidator._run_completed,
}


def _check_run_log(result: result_pb2.RunResult, limits: Limits) -> str | None:
    """`run.log`: level defaults to INFO, text is truncated to `RUN_LOG_MAX_CHARS`; `fields` only need
    to fit the result size cap (checked before)."""
    entry = result.run_log
    if entry.level == result_pb2.RUN_LOG_LEVEL_UNSPECIFIED:
        entry.level = result_pb2.RUN_LOG_LEVEL_INFO
    if len(entry.text) > RUN_LOG_MAX_CHARS:
        entry.text = entry.text[: RUN_LOG_MAX_CHARS - 1] + "…"
    return None


def _check_interaction(
    result: result_pb2.RunResult, capabilities: common_pb2.InteractionCapabilities | None, run_id: str
) -> str | None:
    """`interaction.requested`: the SDK's checks (limits, the surface's `max_fields`, expiry at most 24 h
    ahead), then the default expiry (30 minutes after the result) filled in. Dropped when invalid."""
    request = result.interaction_requested.interaction
    if not result.interaction_requested.HasField("interaction"):
        return "invalid_interaction"
    now = (
        result.timestamp.ToDatetime(tzinfo=dt.UTC)
        if result.HasField("timestamp")
        else dt.datetime.now(dt.UTC)
    )
    # a runner clock a little ahead must not make a fresh request look expired
    now = min(now, dt.datetime.now(dt.UTC))
    try:
        interactions.validate(request, capabilities=capabilities, now=now)
    except AgentRunnerError as exc:
        log.warning(
            "result.invalid_interaction",
            run_id=run_id,
            reason=exc.reason,
            problem=exc.message,
            field=str(exc.metadata.get("field", "")),
        )
        return "invalid_interaction"
    if not request.HasField("expires_at"):
        request.expires_at.FromDatetime(now + dt.timedelta(seconds=INTERACTION_DEFAULT_TTL_SECONDS))
    return None
