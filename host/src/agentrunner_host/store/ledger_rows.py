"""How the run ledger lays a run and its results out in rows, and a run's wire form.

One `runs` row per run (`RECORD_FIELDS` plus its metadata and owner); its results in `run_results`
rows in sequence order, consecutive deltas packed into one row (`packed_rows`, read back by
`unpack_results`). The ledger's write side (`store/ledger.py`) and read side (`store/ledger_reads.py`)
both go through these.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Sequence
from typing import Any

from agentrunner.errors import InvalidArgumentError
from agentrunner.protocol import result_type
from agentrunner.v1 import host_service_pb2, result_pb2
from agentrunner_host.ports import RunRecord, utcnow
from agentrunner_host.store.common import dict_to_struct, json_to_message, to_timestamp
from agentrunner_host.store.schema import RunRow

RECORD_FIELDS = (
    "run_id",
    "event_id",
    "agent_id",
    "binding_id",
    "runner_id",
    "status",
    "status_reason",
    "conversation_id",
    "thread_id",
    "bot_id",
    "workspace_id",
    "trace_id",
    "created_at",
    "started_at",
    "finished_at",
    "deadline_at",
    "cancel_requested_at",
    "usage",
    "last_sequence",
)


def to_record(row: RunRow) -> RunRecord:
    return RunRecord(
        **{name: getattr(row, name) for name in RECORD_FIELDS},
        metadata=dict(row.meta or {}),
    )


#: ledger metadata the host keeps for itself (e.g. the digest that tells a duplicate event from a conflicting
#: one): never sent to clients or runners
PRIVATE_METADATA_KEYS = frozenset({"event_digest"})


def run_to_proto(record: RunRecord) -> host_service_pb2.Run:
    """The wire form of a ledger record (`agentrunner.v1.Run`), for clients and runners alike."""
    run = host_service_pb2.Run(
        run_id=record.run_id,
        event_id=record.event_id,
        agent_id=record.agent_id,
        binding_id=record.binding_id,
        runner_id=record.runner_id,
        conversation_id=record.conversation_id,
        thread_id=record.thread_id,
        status=record.status,
        status_reason=record.status_reason,
        last_sequence=record.last_sequence,
        trace_id=record.trace_id,
        bot_id=record.bot_id,
        workspace_id=record.workspace_id,
        metadata=dict_to_struct({k: v for k, v in record.metadata.items() if k not in PRIVATE_METADATA_KEYS}),
    )
    for field, value in (
        ("create_time", record.created_at),
        ("start_time", record.started_at),
        ("finish_time", record.finished_at),
        ("deadline_time", record.deadline_at),
        ("cancel_request_time", record.cancel_requested_at),
    ):
        ts = to_timestamp(value)
        if ts is not None:
            getattr(run, field).CopyFrom(ts)
    if record.usage:
        json_to_message(record.usage, run.usage)
    return run


#: `result_type` of the ledger rows that hold a run of consecutive `message.delta` results
DELTA_TYPE = "message.delta"
_FRAME = struct.Struct(">I")


def _pack(payloads: Sequence[bytes]) -> bytes:
    """Several serialized results in one ledger payload: each one prefixed with its 4-byte length."""
    return b"".join([_FRAME.pack(len(p)) + p for p in payloads])


def unpack_results(payload: bytes, count: int) -> list[result_pb2.RunResult]:
    """The results a ledger row holds (`count` of them; one plain serialized result when `count` is 1)."""
    if count == 1:
        return [result_pb2.RunResult.FromString(payload)]
    out: list[result_pb2.RunResult] = []
    at = 0
    while at < len(payload):
        (size,) = _FRAME.unpack_from(payload, at)
        at += _FRAME.size
        out.append(result_pb2.RunResult.FromString(payload[at : at + size]))
        at += size
    return out


def packed_rows(results: Sequence[result_pb2.RunResult]) -> list[tuple[int, str, bytes, int]]:
    """`(sequence, result_type, payload, result_count)` ledger rows for results in sequence order.

    Consecutive `message.delta` results (contiguous sequences) share ONE row, keyed by the last
    sequence it holds: a streaming run writes a row per delta batch instead of a row per delta. With
    many runs streaming at once, their rows land on as many index pages per commit, so per-delta rows
    cost most of a batch's write (measured: about 3x the commit work of packed rows). Every other
    result keeps a row of its own (`result_count` 1, the plain serialized result)."""
    if any(r.sequence <= 0 for r in results):
        raise InvalidArgumentError("result sequence must start at 1", field="sequence")
    rows: list[tuple[int, str, bytes, int]] = []
    deltas: list[bytes] = []
    last = 0

    def close_deltas() -> None:
        if len(deltas) == 1:
            rows.append((last, DELTA_TYPE, deltas[0], 1))
        elif deltas:
            rows.append((last, DELTA_TYPE, _pack(deltas), len(deltas)))
        deltas.clear()

    for r in results:
        payload = r.SerializeToString(deterministic=True)
        if r.WhichOneof("payload") == "message_delta":
            if deltas and r.sequence != last + 1:
                close_deltas()
            deltas.append(payload)
        else:
            close_deltas()
            rows.append((r.sequence, result_type(r) or "", payload, 1))
        last = r.sequence
    close_deltas()
    return rows


def result_rows(
    run_id: str, results: Sequence[result_pb2.RunResult], now: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """`run_results` rows for a batch (`packed_rows`; sequences must be positive)."""
    now = now or utcnow()
    return [
        {
            "run_id": run_id,
            "sequence": sequence,
            "result_type": kind,
            "payload": payload,
            "result_count": count,
            "created_at": now,
        }
        for sequence, kind, payload, count in packed_rows(results)
    ]
