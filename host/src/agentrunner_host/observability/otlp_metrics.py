"""The host's metrics over OTLP too: the Prometheus registry's `agentrunner_*` families, pushed
periodically with the OpenTelemetry OTLP/gRPC metric exporter.

The metrics are defined once, with prometheus_client (cheap on the per-result path, and what
`/metrics` serves). For a deployment that collects OTLP instead of scraping, `MetricsPusher` turns a
snapshot of the registry into OpenTelemetry's metric data model every interval (counters as
cumulative monotonic sums, gauges as gauges, histograms with their explicit bounds) and hands it to the
exporter, which does the encoding, TLS, headers and retries. Names stay the Prometheus family names
(`agentrunner_run_duration_seconds`, unit `s`) so both backends show the same series.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, cast

import structlog
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric as PromFamily

log = structlog.get_logger("agentrunner_host.observability.otlp_metrics")

PREFIX = "agentrunner_"
_SCOPE = InstrumentationScope("agentrunner_host")
_UNITS = {"_seconds": "s", "_tokens": "{token}"}


def _unit(name: str) -> str:
    return next((unit for suffix, unit in _UNITS.items() if name.endswith(suffix)), "")


def _attributes(labels: dict[str, str], drop: str = "") -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != drop}


def _histogram(family: PromFamily, start: int, now: int) -> Histogram:
    """Prometheus histogram samples (cumulative `le` buckets, `_sum`, `_count`) as OTLP points."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample in family.samples:
        key = tuple(sorted(_attributes(sample.labels, "le").items()))
        entry = series.setdefault(key, {"buckets": [], "sum": 0.0, "count": 0})
        if sample.name.endswith("_bucket"):
            entry["buckets"].append((float(sample.labels["le"]), int(sample.value)))
        elif sample.name.endswith("_sum"):
            entry["sum"] = sample.value
        elif sample.name.endswith("_count"):
            entry["count"] = int(sample.value)
    points = []
    for key, entry in series.items():
        cumulative = sorted(entry["buckets"])
        counts = [c - (cumulative[i - 1][1] if i else 0) for i, (_, c) in enumerate(cumulative)]
        points.append(
            HistogramDataPoint(
                attributes=dict(key),
                start_time_unix_nano=start,
                time_unix_nano=now,
                count=entry["count"],
                sum=entry["sum"],
                bucket_counts=counts,
                explicit_bounds=[bound for bound, _ in cumulative if bound != float("inf")],
                # Prometheus histograms keep no min/max: None leaves the optional OTLP fields unset
                min=cast(float, None),
                max=cast(float, None),
            )
        )
    return Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)


def snapshot(registry: CollectorRegistry, start: int, now: int | None = None) -> list[Metric]:
    """The registry's `agentrunner_*` families as OpenTelemetry metrics (cumulative since `start`)."""
    now = now or time.time_ns()
    metrics = []
    for family in registry.collect():
        if not family.name.startswith(PREFIX):
            continue
        data: Sum | Gauge | Histogram
        if family.type == "counter":
            points = [
                NumberDataPoint(
                    attributes=dict(s.labels), start_time_unix_nano=start, time_unix_nano=now, value=s.value
                )
                for s in family.samples
                if s.name.endswith("_total")
            ]
            data = Sum(
                data_points=points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
                is_monotonic=True,
            )
        elif family.type == "gauge":
            data = Gauge(
                data_points=[
                    NumberDataPoint(
                        attributes=dict(s.labels),
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        value=s.value,
                    )
                    for s in family.samples
                ]
            )
        elif family.type == "histogram":
            data = _histogram(family, start, now)
        else:
            continue
        metrics.append(
            Metric(name=family.name, description=family.documentation, unit=_unit(family.name), data=data)
        )
    return metrics


def interval_seconds(configured: float) -> float:
    """`OTEL_METRIC_EXPORT_INTERVAL` (milliseconds, the OpenTelemetry variable) beats the config."""
    raw = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "")
    with contextlib.suppress(ValueError):
        if raw and float(raw) > 0:
            return float(raw) / 1000
    return configured


class MetricsPusher:
    """Exports the registry every `interval` seconds, and once more when stopped."""

    def __init__(
        self,
        endpoint: str,
        interval: float,
        resource: Resource,
        registry: CollectorRegistry = REGISTRY,
        exporter: Any = None,
    ) -> None:
        self.interval = interval
        self.resource = resource
        self.registry = registry
        self.exporter = exporter or OTLPMetricExporter(
            endpoint=endpoint, insecure=endpoint.startswith("http://")
        )
        self.start_ns = time.time_ns()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="otlp-metrics")

    def _data(self) -> MetricsData:
        scope = ScopeMetrics(scope=_SCOPE, metrics=snapshot(self.registry, self.start_ns), schema_url="")
        return MetricsData(
            resource_metrics=[ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")]
        )

    async def push(self) -> None:
        result = await asyncio.to_thread(self.exporter.export, self._data())
        if getattr(result, "name", "SUCCESS") != "SUCCESS":
            log.warning("otlp_metrics.export_failed", result=str(result))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.push()
            except Exception as exc:  # an unreachable collector never stops the host
                log.warning("otlp_metrics.export_failed", error=repr(exc))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.push()
        await asyncio.to_thread(self.exporter.shutdown)
