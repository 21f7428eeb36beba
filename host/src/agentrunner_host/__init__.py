"""The agent host of the LangBot AgentRunner protocol v1: event -> binding -> runner -> validated results."""

__version__ = "0.1.0"
