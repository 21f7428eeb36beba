"""The reference runner (`plugin:langbot/reference/default`); see `runner.py` for its behaviours."""

from agentrunner_runners.reference.runner import ReferenceRunner

__all__ = ["ReferenceRunner"]
