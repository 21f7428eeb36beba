"""The agent host of the LangBot AgentRunner protocol v1: event -> binding -> runner -> validated results."""

# (first: the SDK's import hooks quiet grpc's C core and load structlog without rich, before any host
# module imports either)
import agentrunner  # noqa: F401

__version__ = "1.1.0"  # = VERSION at the repository root (tools/versions.py)
