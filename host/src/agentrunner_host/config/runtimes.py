"""The `runtimes` section of the host config: who may connect as a runtime (`runtimes.clients`), which
runner ids and labels each credential may announce, and the liveness timings (docs/runtimes.md).

A runtime client is configured like a HostService client (`auth.clients`): the sha256 of an API key (or
an environment variable holding the key) or client certificate names, and an expiry.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: a runtime id: letters, digits, `_ . : -` (the default is the machine's hostname)
RUNTIME_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
#: a label key or value
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CredentialFields(_Strict):
    """The credentials of a HostService client (`auth.clients`) or of a runtime (`runtimes.clients`):
    API key digests, a key from the environment, client certificate names, an expiry."""

    id: str = Field(min_length=1, max_length=128)
    #: sha256 (hex) of each API key it may present (`authorization: Bearer <key>`); several allow
    #: rotation. `agentrunner-host auth new-key` (`--runtime NAME` for a runtime) makes a key and its hash.
    api_key_sha256: list[str] = Field(default_factory=list)
    #: an environment variable holding the key itself (hashed when the config loads, never logged)
    api_key_env: str | None = None
    #: client certificate names (subject CN or a DNS / URI SAN) that identify it over mutual TLS
    #: (`listen.tls.client_ca_file`)
    tls_names: list[str] = Field(default_factory=list)
    #: after this instant its credentials are refused
    expires_at: dt.datetime | None = None

    @field_validator("api_key_sha256")
    @classmethod
    def _hex_digests(cls, values: list[str]) -> list[str]:
        out = []
        for value in values:
            digest = value.removeprefix("sha256:").lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError("an api_key_sha256 entry is 64 hex digits (sha256 of the key)")
            out.append(digest)
        return out

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("expires_at needs a time zone (for example 2030-01-01T00:00:00Z)")
        return value


class RuntimeClientConfig(CredentialFields):
    """A credential runtimes connect with, and what a runtime holding it may announce."""

    #: runner ids it may serve. A list names them: those ids are then served by the runtimes of the
    #: clients listing them (and by endpoints whose `runner_ids` list them too: config decides). `*`:
    #: any id that no endpoint's or other runtime client's list names and no endpoint serves.
    runner_ids: list[str] | Literal["*"] = "*"
    #: labels it may announce: `key=value`, `key=*` (any value) or `*` (any label)
    labels: list[str] = Field(default_factory=lambda: ["*"])
    #: most slots a runtime of this credential may announce
    max_slots: int = Field(64, gt=0)

    @field_validator("labels")
    @classmethod
    def _label_patterns(cls, values: list[str]) -> list[str]:
        for value in values:
            if value != "*" and "=" not in value:
                raise ValueError(f"{value!r}: a label pattern is `key=value`, `key=*` or `*`")
        return values

    @model_validator(mode="after")
    def _has_credentials(self) -> RuntimeClientConfig:
        if not (self.api_key_sha256 or self.api_key_env or self.tls_names):
            raise ValueError("a runtime client needs api_key_sha256, api_key_env or tls_names")
        return self

    def may_label(self, key: str, value: str) -> bool:
        """Whether a runtime of this credential may announce `key=value`."""
        return any(p == "*" or p == f"{key}=*" or p == f"{key}={value}" for p in self.labels)


class RuntimesConfig(_Strict):
    """Runtimes that dial in (`RuntimeService`)."""

    #: runtimes without credentials: `loopback` accepts them from loopback peers while the host listens
    #: on a loopback address only (local development: any runner id no endpoint or client claims, any
    #: label); `none` refuses them. Unset: `loopback` while no runtime clients are configured, else `none`.
    anonymous: Literal["loopback", "none"] | None = None
    clients: list[RuntimeClientConfig] = Field(default_factory=list)
    #: how often a runtime heartbeats (sent in `welcome`)
    heartbeat_interval_seconds: float = Field(2.0, gt=0, le=60)
    #: a runtime without a heartbeat for this long is offline: its stream is ended, its runs fail
    offline_after_seconds: float = Field(6.0, gt=0, le=300)
    #: how long a runtime has to send `hello` after opening `Connect`
    hello_timeout_seconds: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _offline_after_beats(self) -> RuntimesConfig:
        if self.offline_after_seconds < 2 * self.heartbeat_interval_seconds:
            raise ValueError("offline_after_seconds must be at least twice heartbeat_interval_seconds")
        return self


def check_selector(selector: dict[str, str]) -> dict[str, str]:
    """An agent's `runtime_selector`: label keys and values of the runtime label syntax."""
    for key, value in selector.items():
        if not LABEL_PATTERN.match(key) or not LABEL_PATTERN.match(value):
            raise ValueError(f"runtime_selector {key}={value}: letters, digits and _ . / - only")
    return selector
