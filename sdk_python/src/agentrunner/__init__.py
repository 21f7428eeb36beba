"""LangBot AgentRunner SDK."""
