"""Prometheus metrics are made when the host serves or pushes them (issue 37): before that updates are
dropped; afterwards every update counts, through the children modules took before the switch too (the
result validator keeps one per result type). In a fresh interpreter: this session enabled metrics."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from agentrunner_host.observability import lazy_metrics
from agentrunner_host.observability.telemetry import RESULTS, RUNS_OPEN, observed_call, TOOL_CALL_DURATION
from agentrunner_host.runtimes import metrics as runtime_metrics
kept = RESULTS.labels("message.delta")          # taken at import time, as run/validation.py does
kept.inc(); RUNS_OPEN.inc()                      # metrics off: dropped, and prometheus_client not loaded
print("loaded before:", "prometheus_client" in sys.modules)
lazy_metrics.enable_metrics()
from prometheus_client import REGISTRY, generate_latest
kept.inc(); kept.inc(); RUNS_OPEN.inc()
with observed_call("tool", TOOL_CALL_DURATION, {}, source="native"):
    pass
value = REGISTRY.get_sample_value
print("delta:", value("agentrunner_results_total", {"type": "message.delta"}))
print("open:", value("agentrunner_runs_open"))
print("tool:", value("agentrunner_tool_call_duration_seconds_count", {"source": "native", "outcome": "ok"}))
print("served:", b"agentrunner_runtimes_connected" in generate_latest(REGISTRY))
"""


def test_updates_count_from_the_switch_on_through_children_taken_before_it() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "loaded before: False",
        "delta: 2.0",  # the two after the switch, through the child taken before it
        "open: 1.0",
        "tool: 1.0",
        "served: True",  # the runtime metrics are declared and served with the rest
    ]
