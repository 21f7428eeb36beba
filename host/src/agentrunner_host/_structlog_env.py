"""Load structlog without rich, before any host module imports structlog (as the SDK's
`agentrunner._structlog_env` does for runners; see there why). Not through the SDK package: that
would load grpc before the CLI has quieted its C core (`GRPC_VERBOSITY`, `agentrunner_host.cli`)."""

import sys

if "structlog" not in sys.modules and "rich" not in sys.modules:
    sys.modules["rich"] = None  # type: ignore[assignment]  # (import rich -> ImportError while it loads)
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
