"""The agent host of the LangBot AgentRunner protocol v1: event -> binding -> runner -> validated results."""

from agentrunner_host import _structlog_env  # noqa: F401  (first: structlog loads without rich)

__version__ = "1.1.0"  # = VERSION at the repository root (tools/versions.py)
