"""The agent host of the LangBot AgentRunner protocol v1: event -> binding -> runner -> validated results."""

__version__ = "1.1.0"  # = VERSION at the repository root (tools/versions.py)
