"""Runtimes that dial in: serve runners by connecting out to the host (`python -m agentrunner connect`),
with no listening port (docs/runtimes.md)."""

from agentrunner.detect import DEFAULT_HARNESSES, detect_harness, detect_harnesses
from agentrunner.runtime.session import Runtime, RuntimeOptions, RuntimeRefused, backoff_delay, connect_async

__all__ = [
    "DEFAULT_HARNESSES",
    "Runtime",
    "RuntimeOptions",
    "RuntimeRefused",
    "backoff_delay",
    "connect_async",
    "detect_harness",
    "detect_harnesses",
]
