"""Stored runtimes as the wire shows them (`agentrunner.v1.Runtime`, `RuntimeEvent`), with the live state
of runtimes connected to this process laid over the stored one (slots in use, status)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from google.protobuf import json_format

from agentrunner.v1 import runtime_pb2
from agentrunner_host.ports import utcnow
from agentrunner_host.runtimes.registry import RuntimeRegistry
from agentrunner_host.store.runtimes import DRAINING, OFFLINE, ONLINE
from agentrunner_host.store.schema.facts import RuntimeEventRow, RuntimeRow
from agentrunner_host.views.jsonview import message_dict

_STATUS = {
    ONLINE: runtime_pb2.RUNTIME_STATUS_ONLINE,
    DRAINING: runtime_pb2.RUNTIME_STATUS_DRAINING,
    OFFLINE: runtime_pb2.RUNTIME_STATUS_OFFLINE,
}
STATUS_NAMES = {v: k for k, v in _STATUS.items()}


def _stamp(target: Any, value: dt.datetime | None) -> None:
    if value is not None:
        target.FromDatetime(value)


def runtime_message(
    row: RuntimeRow, registry: RuntimeRegistry | None, offline_after: float
) -> runtime_pb2.Runtime:
    """A stored runtime; one whose host stopped heartbeating it (a replica that died) shows offline."""
    out = runtime_pb2.Runtime(
        runtime_id=row.runtime_id,
        status=_STATUS.get(row.status, runtime_pb2.RUNTIME_STATUS_UNSPECIFIED),
        client_id=row.client_id,
        labels={str(k): str(v) for k, v in (row.labels or {}).items()},
        slots=row.slots,
        runner_ids=[str(r) for r in row.runner_ids or []],
        drained=row.drained,
        status_reason=row.status_reason,
        host_instance_id=row.host_instance_id,
        peer=row.peer,
    )
    json_format.ParseDict(row.machine or {}, out.machine, ignore_unknown_fields=True)
    json_format.ParseDict(row.sdk or {}, out.sdk, ignore_unknown_fields=True)
    for capability in row.capabilities or []:
        json_format.ParseDict(capability, out.capabilities.add(), ignore_unknown_fields=True)
    _stamp(out.connect_time, row.connected_at)
    _stamp(out.heartbeat_time, row.heartbeat_at)
    _stamp(out.disconnect_time, row.disconnected_at)
    if row.heartbeat_interval_ms:
        out.heartbeat_interval.FromMilliseconds(row.heartbeat_interval_ms)
    live = registry.by_runtime.get(row.runtime_id) if registry is not None else None
    if live is not None and live.id == row.connection_id:
        out.status = live.status()
        out.slots_in_use = len(live.running)
    elif row.status != OFFLINE:
        stale = row.heartbeat_at is None or (utcnow() - row.heartbeat_at).total_seconds() > 2 * offline_after
        if stale:
            out.status = runtime_pb2.RUNTIME_STATUS_OFFLINE
            out.status_reason = "no heartbeat recorded recently (its host replica stopped?)"
        else:
            out.slots_in_use = max(0, row.slots - row.free_slots)
    return out


def event_message(row: RuntimeEventRow) -> runtime_pb2.RuntimeEvent:
    out = runtime_pb2.RuntimeEvent(
        kind=row.kind, run_id=row.run_id, reason=row.reason, client_id=row.client_id
    )
    _stamp(out.time, row.created_at)
    if row.duration_ms is not None:
        out.duration.FromMilliseconds(row.duration_ms)
    return out


STATUS_WORDS = {
    runtime_pb2.RUNTIME_STATUS_ONLINE: "online",
    runtime_pb2.RUNTIME_STATUS_DRAINING: "draining",
    runtime_pb2.RUNTIME_STATUS_OFFLINE: "offline",
}
LOGIN_WORDS = {
    runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_IN: "logged in",
    runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_OUT: "logged out",
    runtime_pb2.HARNESS_LOGIN_STATUS_UNKNOWN: "login unknown",
}


def runtime_dict(runtime: runtime_pb2.Runtime) -> dict[str, Any]:
    """A runtime as JSON-ready data: status and login statuses as words."""
    data = message_dict(runtime)
    data["status"] = STATUS_WORDS.get(runtime.status, "unknown")
    for item, capability in zip(data.get("capabilities", []), runtime.capabilities, strict=True):
        item["login_status"] = LOGIN_WORDS.get(capability.login_status, "not checked")
    return data
