"""Quiet grpc's C core before it loads: imported first by the package, so before any `grpc` import.

The C core reads `GRPC_VERBOSITY` once, when `grpc` is first imported. Left unset, grpcio (1.66 and
later) writes INFO lines such as `I1207 ... chttp2_transport.cc] ... Got goaway` to stderr, which break
a runner's one-JSON-object-per-line logs (`AGENTRUNNER_LOG_FORMAT=json`) and litter its text logs.
`ERROR` keeps the C core's real errors; a value the user set wins. The variable is set only while
`grpc` loads, so the processes this one starts (a CLI agent, a host under test) see the environment
they would have seen without the SDK.
"""

from __future__ import annotations

import os

if "GRPC_VERBOSITY" not in os.environ:
    os.environ["GRPC_VERBOSITY"] = "ERROR"
    try:
        import grpc  # noqa: F401  (the C core reads the variable now)
    finally:
        del os.environ["GRPC_VERBOSITY"]
