"""Config value types shared by service runners' pydantic config models (`Runner.config_model`).

A value that fails here is `runner.config_invalid` with the field named, before any request is sent.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

__all__ = ["HttpUrl", "http_url"]


def http_url(value: str) -> str:
    """An absolute `http(s)://host[:port][/path]` URL, without a trailing slash."""
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"invalid port in {value!r}") from None
    return value.rstrip("/")


#: `str` checked by `http_url`.
HttpUrl = Annotated[str, AfterValidator(http_url)]
