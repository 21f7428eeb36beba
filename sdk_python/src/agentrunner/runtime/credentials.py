"""The runtime key: where `python -m agentrunner connect` takes it from, and where it may not go.

The key comes from the environment, `AGENTRUNNER_RUNTIME_KEY` or a file named by
`AGENTRUNNER_RUNTIME_KEY_FILE` (a container secret), never from the command line (a process list shows
it). The connect command takes it out of the process environment once read (`take_runtime_key`), so
nothing the runners start inherits it. Over plaintext it goes only to a loopback host, unless
`AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1` says a proxy in front terminates TLS (`check_key_transport`): it
would otherwise cross the network in clear.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from agentrunner.client import (
    ALLOW_PLAINTEXT_ENV,
    ApiKey,
    ClientCredentialsError,
    checked_api_key,
    is_loopback_target,
    read_api_key_file,
)

KEY_ENV = "AGENTRUNNER_RUNTIME_KEY"
KEY_FILE_ENV = "AGENTRUNNER_RUNTIME_KEY_FILE"


def load_runtime_key(environ: Mapping[str, str] = os.environ) -> ApiKey | None:
    """The key from `AGENTRUNNER_RUNTIME_KEY_FILE` or `AGENTRUNNER_RUNTIME_KEY` (None: neither is set);
    both set is an error rather than a guess which one wins."""
    from_file = environ.get(KEY_FILE_ENV, "").strip()
    from_env = environ.get(KEY_ENV, "")
    if from_file and from_env.strip():
        raise ClientCredentialsError(f"both {KEY_ENV} and {KEY_FILE_ENV} are set: keep one")
    if from_file:
        return read_api_key_file(Path(from_file), f"{KEY_FILE_ENV} ({from_file})")
    if from_env.strip():
        return checked_api_key(from_env, KEY_ENV)
    return None


def take_runtime_key(environ: MutableMapping[str, str] = os.environ) -> ApiKey | None:
    """`load_runtime_key`, then both variables removed from `environ` (the runners' children never see
    the key)."""
    key = load_runtime_key(environ)
    environ.pop(KEY_ENV, None)
    environ.pop(KEY_FILE_ENV, None)
    return key


def check_key_transport(
    address: str, key: str, tls: object | None, environ: Mapping[str, str] = os.environ
) -> None:
    """Refuses (`ClientCredentialsError`) to send a key over plaintext to a host that is not on loopback,
    unless `AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1`."""
    if not key or tls is not None or is_loopback_target(address):
        return
    if environ.get(ALLOW_PLAINTEXT_ENV, "").strip() == "1":
        return
    raise ClientCredentialsError(
        f"{address} is not a loopback address and the connection has no TLS: the runtime key would cross "
        "the network in clear (give --host-ca or --tls, or set AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1 when a "
        "proxy in front of the host terminates TLS)"
    )
