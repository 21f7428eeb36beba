"""Backends runners reach through the proxy service: models, tools and knowledge bases."""
