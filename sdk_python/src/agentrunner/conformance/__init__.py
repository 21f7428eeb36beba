"""Conformance kits for Protocol v1, language-neutral because they speak only gRPC.

- `check_runner(target)`: plays the host against a runner at `host:port` (`agentrunner-conformance runner`).
- `check_host(target, runner_listen=...)`: plays runners against a host (`agentrunner-conformance host`).

Both return a `Report` (the pass/fail table, JUnit XML).
"""

from agentrunner.conformance.report import CheckResult, Report, Status

__all__ = ["CheckResult", "Report", "Status"]
