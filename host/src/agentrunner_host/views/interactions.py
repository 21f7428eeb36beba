"""What a client that shows every kind of interaction declares to the host (the CLI and the console).

Both print every field type and action style, and answer through `SubmitInteraction`, so both send the
same `InteractionCapabilities` with a run.
"""

from __future__ import annotations

from agentrunner.v1 import common_pb2


def full_interaction_support() -> common_pb2.InteractionCapabilities:
    """Every field type and action style, without in-place updates (the CLI prints; `interact` answers)."""
    caps = common_pb2.InteractionCapabilities(supports_updates=False)
    caps.field_types.extend(v for v in common_pb2.InteractionFieldType.values() if v)
    caps.action_styles.extend(v for v in common_pb2.InteractionActionStyle.values() if v)
    return caps
