"""How much each conformance check weighs: the RFC 2119 word of the rule it tests (docs/protocol.md §8).

A failed MUST check makes the target NOT conformant. A failed SHOULD check is a warning: the target
is "conformant with N warnings", and `--strict` fails on warnings too. A rule is a SHOULD when the
other side copes without it and the user loses only diagnostics or a nicer failure, never a run, a
result or a secret:

- `proxy.traceparent`: without it the host still serves the call; only the trace is broken.
- `proxy.deadline`: the host bounds every call by the run's deadline anyway.
- `control.heartbeat`: v1 hosts record heartbeats but never end a run for a missed one.
- `control.closed`: the host closes the run's Control stream when the run ends.
- `stream.deadline`: the host's own deadline ends the run (TIMEOUT instead of the runner's
  `deadline_exceeded`).

Every check not named here is a MUST (the host kit's checks all are: a host that breaks one of them
loses or leaks something a runner or a client relies on).
"""

from __future__ import annotations

import enum


class Level(enum.Enum):
    """The RFC 2119 word of a rule: a broken MUST fails the target, a broken SHOULD warns."""

    MUST = "MUST"
    SHOULD = "SHOULD"


SHOULD_CHECKS = frozenset(
    {
        "proxy.traceparent",
        "proxy.deadline",
        "control.heartbeat",
        "control.closed",
        "stream.deadline",
    }
)


def level(check_id: str) -> Level:
    """The level of a check, by its id."""
    return Level.SHOULD if check_id in SHOULD_CHECKS else Level.MUST
