"""Quiet grpc's C core before it loads: imported first by the package, so before any `grpc` import.

The C core reads `GRPC_VERBOSITY` once, when `grpc` is first imported. Left unset, grpcio (1.66 and
later) writes INFO lines such as `I1207 ... chttp2_transport.cc] ... Got goaway` to stderr, which break
a runner's one-JSON-object-per-line logs (`AGENTRUNNER_LOG_FORMAT=json`) and litter its text logs.
`ERROR` keeps the C core's real errors.

`GRPC_EXPERIMENTS` (read at the same time) turns off grpcio's EventEngine for client channels and
listeners (`event_engine_client`, `event_engine_listener`): with it, the C core polls sockets on
EventEngine threads of its own and hands each completion on to grpc.aio's poller thread, which wakes
those threads about 12 times per run in the host and 3 times in a runner (`bench/bench_wakeups.py`;
on this project's VMs each wake-up of an idle vCPU costs CPU and latency). Without it, the poller
thread polls the sockets itself (the C core's epoll1 engine). Both stacks are grpcio's own; the figures
are in docs/performance.md ("Wake-ups per run").

A value the user set wins (for either variable, wholesale). The variables are set only while `grpc`
loads, so the processes this one starts (a CLI agent, a host under test) see the environment they
would have seen without the SDK.
"""

from __future__ import annotations

import os

#: the variables set while `grpc` loads, when the user has not set them
DEFAULTS = {"GRPC_VERBOSITY": "ERROR", "GRPC_EXPERIMENTS": "-event_engine_client,-event_engine_listener"}

_set = [name for name in DEFAULTS if name not in os.environ]
for _name in _set:
    os.environ[_name] = DEFAULTS[_name]
try:
    import grpc  # noqa: F401  (the C core reads the variables now)
finally:
    for _name in _set:
        del os.environ[_name]
