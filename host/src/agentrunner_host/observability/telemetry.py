"""Logs, metrics and trace context.

- structlog JSON logs; `run_id` / `trace_id` are bound with contextvars so every line of a run has them.
- Prometheus metrics (conventional names, seconds and tokens as units): runs by status, their duration,
  open runs, time to first result, results by type, proxy calls by method, gRPC code and ErrorInfo
  reason with their latency, upstream model and tool call latency, tokens, runner endpoint health.
- W3C trace context (OpenTelemetry): extracted from incoming gRPC metadata, injected into runner calls.
  Spans: the run, the runner call, each proxy call, each model and tool call. Without a tracer provider
  of the deployment's (`telemetry.otlp_endpoint` installs the OpenTelemetry SDK's, with its exporter)
  they are non-recording spans with ids this module draws (for logs and propagation): the
  OpenTelemetry SDK is not imported for them (issue 37: ~2 MiB and psutil in every idle host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentrunner_host.observability.lazy_metrics import LazyMetric

if TYPE_CHECKING:
    from agentrunner_host.ports import RunRecord

_PROPAGATOR = TraceContextTextMapPropagator()

#: the run path's logger (`report_finished` logs the run's last line)
_run_log = structlog.get_logger("agentrunner_host.run")

RUNS = LazyMetric("Counter", "agentrunner_runs_total", "Runs by final status", ["status"])
TIME_TO_FIRST_RESULT = LazyMetric(
    "Histogram",
    "agentrunner_time_to_first_result_seconds",
    "Time from accepting an event to the first validated result",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RESULTS = LazyMetric("Counter", "agentrunner_results_total", "Validated results by type", ["type"])
RESULTS_REJECTED = LazyMetric(
    "Counter", "agentrunner_results_rejected_total", "Dropped results by reason", ["reason"]
)
RUN_DURATION = LazyMetric(
    "Histogram",
    "agentrunner_run_duration_seconds",
    "Time from accepting an event to the run's end, by final status",
    ["status"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
)
RUNS_OPEN = LazyMetric(
    "Gauge", "agentrunner_runs_open", "Runs open on this host (accepted and not yet finished)"
)
#: `code` is the gRPC status code's name (OK on success); `reason` the ErrorInfo reason ("" on success)
PROXY_CALLS = LazyMetric(
    "Counter",
    "agentrunner_proxy_calls_total",
    "Proxy calls by method, gRPC status code and ErrorInfo reason",
    ["method", "code", "reason"],
)
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
PROXY_CALL_DURATION = LazyMetric(
    "Histogram",
    "agentrunner_proxy_call_duration_seconds",
    "Proxy call latency inside the host, by method and gRPC status code",
    ["method", "code"],
    buckets=_CALL_BUCKETS,
)
MODEL_CALL_DURATION = LazyMetric(
    "Histogram",
    "agentrunner_model_call_duration_seconds",
    "Upstream model calls by model id, operation (chat, chat_stream, embed, rerank) and outcome",
    ["model", "operation", "outcome"],
    buckets=_CALL_BUCKETS,
)
MODEL_TOKENS = LazyMetric(
    "Counter",
    "agentrunner_model_tokens_total",
    "Tokens the model providers reported, by model id and type",
    ["model", "type"],
)
TOOL_CALL_DURATION = LazyMetric(
    "Histogram",
    "agentrunner_tool_call_duration_seconds",
    "Tool calls by tool source and outcome",
    ["source", "outcome"],
    buckets=_CALL_BUCKETS,
)

RUNNER_ENDPOINT_UP = LazyMetric(
    "Gauge",
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


#: True once `configure_tracing` found no tracer provider installed: the host draws span ids itself
_own_ids = False
#: what `trace.get_tracer_provider()` returns while nobody installed a provider
_UNSET = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def configure_tracing() -> None:
    """Without a tracer provider of the deployment's (with its exporters, e.g. `telemetry.configure_otlp`,
    installed before the host started), spans get ids drawn here and record nothing."""
    global _own_ids
    _own_ids = isinstance(trace.get_tracer_provider(), _UNSET)


tracer = trace.get_tracer("agentrunner_host")


def recording() -> bool:
    """True when spans are recorded (a provider with exporters), False when only their ids matter."""
    return not isinstance(trace.get_tracer_provider(), _UNSET)


def _random_id(bits: int) -> int:
    """A random non-zero id (as the OpenTelemetry SDK's `RandomIdGenerator` draws them)."""
    while not (value := random.getrandbits(bits)):
        pass
    return value


def start_span(
    name: str,
    parent: otel_context.Context | None = None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: Mapping[str, str] | None = None,
) -> trace.Span:
    """A span, child of `parent` (the current context when None; a new trace when there is none).
    Without a provider nothing records spans, so only their ids matter (logs, the run's trace id,
    propagation to runners): a non-recording span carries them for a fraction of what the SDK spends on
    a span. A provider with exporters gets real SDK spans."""
    if not _own_ids or recording():
        return tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
    caller = trace.get_current_span(parent).get_span_context()
    if caller.is_valid:
        trace_id, flags, state = caller.trace_id, caller.trace_flags, caller.trace_state
    else:
        trace_id, flags, state = _random_id(128), trace.TraceFlags(trace.TraceFlags.SAMPLED), None
    return trace.NonRecordingSpan(trace.SpanContext(trace_id, _random_id(64), False, flags, state))


def start_server_span(name: str, metadata: Iterable[tuple[str, str | bytes]] | None) -> trace.Span:
    """The span of one incoming call, child of the caller's W3C trace context (a new trace without one)."""
    return start_span(name, extract_context(metadata), trace.SpanKind.SERVER)


def end_span(span: trace.Span, error: BaseException | None = None) -> None:
    """Ends a span, marking it failed (with the error's type and ErrorInfo reason) when `error` is set."""
    if error is not None and span.is_recording():
        reason = getattr(error, "reason", "") or type(error).__name__
        span.set_attribute("error.type", reason)
        span.set_status(trace.Status(trace.StatusCode.ERROR, getattr(error, "message", "") or reason))
    span.end()


@contextlib.contextmanager
def observed_call(
    name: str, histogram: LazyMetric, attributes: Mapping[str, str], **labels: str
) -> Iterator[trace.Span]:
    """A client span (child of the current one) and a latency sample labelled with the outcome:
    `ok`, the ErrorInfo reason of a typed error, `cancelled`, or the exception's type."""
    span = start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
    started = time.perf_counter()
    outcome = "ok"
    error: BaseException | None = None
    try:
        yield span
    except BaseException as exc:
        error = exc
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            outcome, error = "cancelled", None
        else:
            outcome = getattr(exc, "reason", "") or type(exc).__name__
        raise
    finally:
        histogram.labels(**labels, outcome=outcome).observe(time.perf_counter() - started)
        end_span(span, error)


def count_tokens(model_id: str, prompt: int, completion: int) -> None:
    if prompt:
        MODEL_TOKENS.labels(model_id, "prompt").inc(prompt)
    if completion:
        MODEL_TOKENS.labels(model_id, "completion").inc(completion)


def extract_context(metadata: Iterable[tuple[str, str | bytes]] | None) -> otel_context.Context:
    carrier = {
        k: v if isinstance(v, str) else v.decode()
        for k, v in (metadata or ())
        if k in ("traceparent", "tracestate")
    }
    if not carrier:  # (most calls): what the propagator returns for a carrier without its headers
        return otel_context.Context()
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


def report_finished(
    span: trace.Span, record: RunRecord, status: str, reason: str, accepted_at: float
) -> None:
    """A finished run's telemetry: the outcome counter, the duration metric (from `accepted_at`, a
    monotonic time), the span's attributes and status, the log line."""
    RUNS.labels(status).inc()
    RUN_DURATION.labels(status).observe(time.monotonic() - accepted_at)
    if span.is_recording():
        span.set_attributes(
            {
                "agentrunner.run_id": record.run_id,
                "agentrunner.agent_id": record.agent_id,
                "agentrunner.runner_id": record.runner_id,
                "agentrunner.run.status": status,
                "agentrunner.run.reason": reason,
            }
        )
        if status != "completed":
            span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
    _run_log.info("run.finished", status=status, reason=reason)
