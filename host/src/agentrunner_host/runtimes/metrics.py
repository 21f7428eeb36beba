"""Prometheus metrics of runtimes that dial in (served with the host's other metrics, `metrics.address`):
runtimes connected, slots per runtime and in use, claims, disconnects by kind, refusals by reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrunner_host.observability.lazy_metrics import LazyMetric

if TYPE_CHECKING:
    from agentrunner_host.runtimes.session import Connection

CONNECTED = LazyMetric("Gauge", "agentrunner_runtimes_connected", "Runtimes connected to this host")
SLOTS = LazyMetric("Gauge", "agentrunner_runtime_slots", "Slots a connected runtime announced", ["runtime"])
SLOTS_USED = LazyMetric(
    "Gauge", "agentrunner_runtime_slots_used", "Runs a connected runtime executes now", ["runtime"]
)
SLOTS_WAITING = LazyMetric(
    "Gauge",
    "agentrunner_runtime_slots_waiting",
    "Free slots of a runtime the host can place a run on now",
    ["runtime"],
)
CLAIMS = LazyMetric("Counter", "agentrunner_runtime_claims_total", "Runs placed on runtimes", ["runtime"])
DISCONNECTS = LazyMetric(
    "Counter",
    "agentrunner_runtime_disconnects_total",
    "Runtime connections that ended, by kind (disconnected, offline, superseded, host_stop)",
    ["kind"],
)
REFUSALS = LazyMetric(
    "Counter", "agentrunner_runtime_refusals_total", "Refused runtime connections by reason", ["reason"]
)


def connected(conn: Connection) -> None:
    CONNECTED.inc()
    SLOTS.labels(conn.runtime_id).set(conn.slots)
    slots(conn)


def disconnected(conn: Connection) -> None:
    CONNECTED.dec()
    for gauge in (SLOTS, SLOTS_USED, SLOTS_WAITING):
        gauge.labels(conn.runtime_id).set(0)


def claimed(conn: Connection) -> None:
    CLAIMS.labels(conn.runtime_id).inc()
    slots(conn)


def slots(conn: Connection) -> None:
    if conn.alive:
        SLOTS_USED.labels(conn.runtime_id).set(len(conn.running))
        SLOTS_WAITING.labels(conn.runtime_id).set(conn.free())
