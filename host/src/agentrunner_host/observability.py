"""Logs, metrics and trace context.

- structlog JSON logs; `run_id` / `trace_id` are bound with contextvars so every line of a run has them.
- Prometheus metrics (runs by status, time to first result, results by type, proxy calls by method/status).
- W3C trace context (OpenTelemetry): extracted from incoming gRPC metadata, injected into runner calls.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter, Gauge, Histogram

_PROPAGATOR = TraceContextTextMapPropagator()

RUNS = Counter("agentrunner_runs_total", "Runs by final status", ["status"])
TIME_TO_FIRST_RESULT = Histogram(
    "agentrunner_time_to_first_result_seconds",
    "Time from accepting an event to the first validated result",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RESULTS = Counter("agentrunner_results_total", "Validated results by type", ["type"])
RESULTS_REJECTED = Counter("agentrunner_results_rejected_total", "Dropped results by reason", ["reason"])
PROXY_CALLS = Counter(
    "agentrunner_proxy_calls_total", "Proxy calls by method and status", ["method", "status"]
)

RUNNER_ENDPOINT_UP = Gauge(
    "agentrunner_runner_endpoint_up",
    "1 while the runner endpoint answers the registry's probes",
    ["endpoint"],
)

_configured = False


#: stdlib loggers too chatty at INFO for an operator's log (alembic announces every plugin it loads,
#: httpx every request)
_QUIET_LOGGERS = {"alembic.runtime.plugins": logging.WARNING, "httpx": logging.WARNING}


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    """JSON lines on stderr, for structlog and for the standard library's loggers alike (alembic's
    migration lines, SQLAlchemy, httpx, ...: one format a log pipeline can parse); idempotent. An unknown
    level is a `ValueError` (the CLI refuses it before it gets here)."""
    global _configured
    if _configured:
        return
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    _configured = True
    renderer: Any = (
        structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name, quiet in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(max(quiet, numeric))
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


#: the provider `configure_tracing` installed (it has no span processors: nothing records or exports)
_own_provider: TracerProvider | None = None
_ids = RandomIdGenerator()


def configure_tracing() -> None:
    """Installs an SDK tracer provider so spans get real ids, unless the deployment installed its own
    (with its exporters) before the host started."""
    global _own_provider
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        _own_provider = TracerProvider()
        trace.set_tracer_provider(_own_provider)


tracer = trace.get_tracer("agentrunner_host")


def start_server_span(name: str, metadata: Iterable[tuple[str, str | bytes]] | None) -> trace.Span:
    """The span of one incoming call, child of the caller's W3C trace context (a new trace without
    one). With the host's own provider nothing records spans, so only their ids matter (logs, the run's
    trace id, propagation to runners): a non-recording span carries them for a fraction of what the
    SDK spends on a span. A deployment's own provider gets real SDK spans."""
    parent = extract_context(metadata)
    provider = trace.get_tracer_provider()
    if _own_provider is None or provider is not _own_provider:
        return tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER)
    caller = trace.get_current_span(parent).get_span_context()
    if caller.is_valid:
        trace_id, flags, state = caller.trace_id, caller.trace_flags, caller.trace_state
    else:
        trace_id, flags, state = _ids.generate_trace_id(), trace.TraceFlags(trace.TraceFlags.SAMPLED), None
    return trace.NonRecordingSpan(trace.SpanContext(trace_id, _ids.generate_span_id(), False, flags, state))


def extract_context(metadata: Iterable[tuple[str, str | bytes]] | None) -> otel_context.Context:
    carrier = {
        k: v if isinstance(v, str) else v.decode()
        for k, v in (metadata or ())
        if k in ("traceparent", "tracestate")
    }
    return _PROPAGATOR.extract(carrier)


def inject_metadata(ctx: otel_context.Context | None = None) -> list[tuple[str, str]]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return list(carrier.items())


def trace_id_of(span: trace.Span) -> str:
    sc = span.get_span_context()
    return format(sc.trace_id, "032x") if sc.trace_id else ""


def traceparent_of(metadata: Mapping[str, str]) -> str:
    return metadata.get("traceparent", "")
