"""Runner-config values from the environment: `{env: NAME}` in the host config.

A field a runner's manifest declares as `secret` (an API key, a password, a token) is given in the host
YAML as `api-key: {env: DIFY_API_KEY}`, the same indirection `models[].api_key_env` gives model keys,
kept under the runner's own key name. The host reads the variable each time it builds a run's context,
so the runner gets the value while the config file, `config check`, logs, errors and stored records only
ever show the variable's name. `string` and `text` fields take the same form (a webhook URL whose path
is itself a credential). A variable that is unset or empty fails the run as `runner.config_invalid`
naming the field and the variable; `config check` reports it beforehand, and warns about a secret
written into the file in plain text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from agentrunner.v1 import manifest_pb2

T = manifest_pb2.ConfigFieldType
#: field types that may be given as `{env: NAME}`
ENV_TYPES = frozenset({T.CONFIG_FIELD_TYPE_SECRET, T.CONFIG_FIELD_TYPE_STRING, T.CONFIG_FIELD_TYPE_TEXT})
HINT = "give it as {env: NAME} and set the variable NAME where the host runs"


class EnvRefError(ValueError):
    """A `{env: NAME}` value that cannot be resolved (`field`: the runner-config key)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def env_ref(value: Any) -> str | None:
    """The variable name of a `{env: NAME}` value, None for any other value."""
    if isinstance(value, Mapping) and set(value) == {"env"}:
        name = value["env"]
        if isinstance(name, str) and name:
            return name
    return None


def _lookup(key: str, name: str, field: manifest_pb2.ConfigField | None, environ: Mapping[str, str]) -> str:
    if field is not None and field.type not in ENV_TYPES:
        raise EnvRefError(
            key, f"runner config field {key!r}: only secret and string fields take {{env: NAME}}"
        )
    value = environ.get(name, "")
    if not value:
        raise EnvRefError(key, f"runner config field {key!r}: environment variable {name} is not set")
    return value


def resolve_env(
    manifest: manifest_pb2.RunnerManifest,
    runner_config: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The runner config with every `{env: NAME}` value replaced by the variable's value.

    Raises `EnvRefError` for an unset variable or a field whose type takes no such value."""
    env = os.environ if environ is None else environ
    schema = {f.name: f for f in manifest.config_schema}
    out = dict(runner_config)
    for key, value in runner_config.items():
        name = env_ref(value)
        if name is not None:
            out[key] = _lookup(key, name, schema.get(key), env)
    return out


def env_problems(
    field: manifest_pb2.ConfigField, key: str, value: Any, environ: Mapping[str, str] | None = None
) -> list[tuple[Literal["error", "warning"], str]]:
    """What `config check` says about one declared field's value: an unresolvable `{env: NAME}` is an
    error, a `secret` written in plain text a warning (the message never holds the value)."""
    name = env_ref(value)
    if name is not None:
        try:
            _lookup(key, name, field, os.environ if environ is None else environ)
        except EnvRefError as exc:
            return [("error", exc.message.split(": ", 1)[-1])]
        return []
    if field.type == T.CONFIG_FIELD_TYPE_SECRET and isinstance(value, str) and value:
        return [("warning", f"a secret in plain text in the config file: {HINT}")]
    return []
