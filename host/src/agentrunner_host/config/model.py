"""The host configuration: one YAML file validated with pydantic, secrets overridable from the environment.

Invalid configuration fails at startup with `ConfigError`, whose message names the file, the path inside
it and the reason. Binding ties (two enabled bindings that could both win the same event) are refused here
rather than discovered at run time.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentrunner_host.capabilities.knowledge import KnowledgeBaseConfig
from agentrunner_host.capabilities.models import ModelConfig
from agentrunner_host.capabilities.tools import ToolsConfig
from agentrunner_host.config.runtimes import CredentialFields, RuntimesConfig, check_selector

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./var/agentrunner.db"
STATE_SCOPES = ("conversation", "actor", "subject", "runner", "binding", "workspace")
STORAGE_AREAS = ("plugin", "workspace", "binding")
RUN_OPERATIONS = ("get", "list", "events_page", "cancel", "append_result", "finalize")


class ConfigError(Exception):
    """A configuration problem; the message is `file: path: reason` lines."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TlsConfig(_Strict):
    """Server or client TLS. A `client_ca_file` on the server turns on mutual TLS."""

    cert_file: pathlib.Path | None = None
    key_file: pathlib.Path | None = None
    ca_file: pathlib.Path | None = None
    client_ca_file: pathlib.Path | None = None
    #: clients only: override the name checked against the server certificate
    server_name: str | None = None


class ListenConfig(_Strict):
    address: str = "127.0.0.1:50051"
    tls: TlsConfig | None = None
    #: address runners use to reach the proxy service; defaults to the bound listen address
    advertise_address: str | None = None
    #: serve plaintext on a non-loopback address (API keys and run tokens then cross the network in
    #: clear: only behind a proxy or mesh that terminates TLS); without it such a host refuses to start
    allow_plaintext: bool = False


class DatabaseConfig(_Strict):
    url: str = DEFAULT_DATABASE_URL
    #: artifact bodies larger than the inline cap are written here
    artifact_dir: pathlib.Path = pathlib.Path("./var/artifacts")
    #: how often expired artifacts and stale sessions are cleaned up (seconds)
    maintenance_interval_seconds: float = Field(300.0, gt=0)


class FleetConfig(_Strict):
    """Several host replicas on one PostgreSQL database (each with its own `instance_id`): how they
    watch each other and hand each other operations (docs/scaling.md). Ignored on SQLite."""

    #: a replica whose lease is not renewed for this long is lost: another replica ends its open runs
    #: (`interrupted`, `host.restarted` naming it). Renewed every third of it.
    lease_seconds: float = Field(10.0, ge=1.0, le=300.0)
    #: how often a replica reads the fleet mailbox without being notified: the longest a lost
    #: notification delays an operation another replica handed it
    poll_seconds: float = Field(1.0, ge=0.05, le=30.0)
    #: how often a replica reads the other replicas' leases (and takes over lost ones)
    sweep_seconds: float = Field(1.0, ge=0.1, le=60.0)
    #: how long a replica waits for another one to answer an operation before it answers UNAVAILABLE
    call_timeout_seconds: float = Field(10.0, gt=0, le=300.0)


class MetricsConfig(_Strict):
    #: `host:port` for the Prometheus endpoint; unset disables it
    address: str | None = None


class TelemetryConfig(_Strict):
    """OTLP export (OpenTelemetry): spans of runs, runner calls, proxy calls, model and tool calls, and
    the metrics `/metrics` serves."""

    #: OTLP/gRPC endpoint (`http://collector:4317`, plaintext; `https://` for TLS); unset: the
    #: `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variables, else none
    otlp_endpoint: str | None = None
    #: `service.name` of the host's spans and metrics (`OTEL_SERVICE_NAME` overrides it)
    service_name: str = "agentrunner-host"
    #: seconds between two OTLP metric exports (`OTEL_METRIC_EXPORT_INTERVAL`, in ms, overrides it)
    metrics_interval_seconds: float = Field(default=15.0, gt=0)


class ConsoleConfig(_Strict):
    """The web console (debug chat, runs, runners) served by the host over HTTP (HTTPS with `tls`).

    On a host with `auth.clients` a user signs in with an API key of one of those clients, and the
    console calls the host as that client; elsewhere it is open on loopback and needs the bearer token
    of `token_env` on any other address."""

    #: `host:port` to serve it on; unset (the default) turns it off. Bound to anything but loopback
    #: it needs a bearer token (`token_env`), or sign-in on a host with `auth.clients`.
    address: str | None = None
    #: environment variable holding the console's bearer token (never the token itself)
    token_env: str = "AGENTRUNNER_CONSOLE_TOKEN"
    #: serve HTTPS with this certificate and key (`cert_file`, `key_file`)
    tls: TlsConfig | None = None
    #: with `auth.clients`, serve sign-in over plain HTTP on a non-loopback address (only behind a proxy
    #: that terminates TLS: API keys and session cookies would otherwise cross the network in clear)
    allow_plaintext: bool = False
    #: how long a sign-in lasts (the session cookie's lifetime), at most
    session_ttl_seconds: float = Field(3600.0, gt=0, le=7 * 86400)

    @model_validator(mode="after")
    def _tls_files(self) -> ConsoleConfig:
        if self.tls is not None and (self.tls.cert_file is None or self.tls.key_file is None):
            raise ValueError("console.tls needs cert_file and key_file")
        return self


class LimitsConfig(_Strict):
    result_max_bytes: int = Field(1024 * 1024, gt=0)
    state_key_max_chars: int = Field(256, gt=0)
    state_value_max_bytes: int = Field(64 * 1024, gt=0)
    #: how long a runner has to stop after a cancel signal before the host cancels the call
    cancel_grace_seconds: float = Field(2.0, ge=0)
    #: how long the host keeps reading (and dropping) results after the terminal one
    post_terminal_drain_seconds: float = Field(1.0, ge=0)
    heartbeat_interval_seconds: float = Field(10.0, gt=0)
    #: runs open in this process at once; a run beyond it is refused RESOURCE_EXHAUSTED (`RATE_LIMITED`,
    #: retryable, with a `RetryInfo` delay) before anything is recorded, never accepted and then dropped
    max_open_runs: int = Field(10_000, gt=0)
    #: seconds a refused client is told to wait (`RetryInfo.retry_delay`)
    busy_retry_seconds: float = Field(1.0, gt=0)
    #: calls the transport has accepted but the host has not picked up yet (a burst arrives faster than
    #: one event loop takes calls in). gRPC core's own default drops calls past 1,000 of them at random
    #: and all past 3,000, as CANCELLED before any host code runs; up to this many the host itself
    #: answers each (a run it cannot take: RESOURCE_EXHAUSTED with a retry delay). See docs/hardening.md
    max_pending_calls: int = Field(10_000, gt=0)
    #: how long such a call may wait to be picked up before gRPC core cancels it (its default: 30 s)
    max_pending_seconds: int = Field(120, gt=0)
    #: updates an `AttachRun` follower may fall behind the run before it is dropped with
    #: RESOURCE_EXHAUSTED (it attaches again with `after_sequence`): a reader that stops reading never
    #: makes the host buffer the whole run
    follower_queue_max: int = Field(4096, gt=0)


class RegistryConfig(_Strict):
    refresh_interval_seconds: float = Field(30.0, gt=0)
    #: faster probing of endpoints that were down, so a returning endpoint is noticed quickly
    retry_interval_seconds: float = Field(2.0, gt=0)
    describe_timeout_seconds: float = Field(5.0, gt=0)


class RunnerEndpointConfig(_Strict):
    """One runner process the host dials; `kind: langbot-plugins` is one the host also starts itself."""

    id: str = Field(min_length=1)
    #: `grpc`: a runner process started elsewhere, dialed at `address`. `langbot-plugins`: the host starts
    #: `python -m agentrunner_runners.langbot_bridge --plugins <plugins_dir>` (LangBot Runner plugins as
    #: runners; needs the runners package's `langbot` extra) on `address` (default: loopback, a free
    #: port), restarts it when it exits and stops it with the host (server/managed.py)
    kind: Literal["grpc", "langbot-plugins"] = "grpc"
    #: `grpc`: required. `langbot-plugins`: where the started bridge listens (`127.0.0.1:0`: a free port)
    address: str = "127.0.0.1:0"
    #: `langbot-plugins`: the directory of plugins (each a directory with its manifest.yaml, or a .lbpkg)
    plugins_dir: pathlib.Path | None = None
    #: `langbot-plugins`: more arguments for the bridge (`--plugin-config FILE`, `--skip-deps-check`, ...)
    args: list[str] = Field(default_factory=list)
    #: `langbot-plugins`: names of environment variables the bridge may see besides the basics (PATH,
    #: HOME, locale, proxies): those its `--plugin-config` reads with `{"env": NAME}`. Nothing else of the
    #: host's environment (API keys, tokens) reaches it or the plugins
    env: list[str] = Field(default_factory=list)
    tls: TlsConfig | None = None
    #: the runner ids this endpoint may serve; an id another endpoint announces is refused (and logged).
    #: Unset: the endpoint may serve any id no other endpoint lists, and an id stays with the first
    #: endpoint that served it for the life of the process (another endpoint never takes it over).
    runner_ids: list[str] | None = None
    #: bearer token sent as `authorization` metadata; prefer `auth_token_env` for secrets
    auth_token: str | None = None
    auth_token_env: str | None = None

    @model_validator(mode="after")
    def _kind_fields(self) -> RunnerEndpointConfig:
        if self.kind == "langbot-plugins" and self.plugins_dir is None:
            raise ValueError("a runner of kind langbot-plugins needs plugins_dir")
        if self.kind == "grpc" and ("address" not in self.model_fields_set or not self.address):
            raise ValueError("a runner endpoint needs an address (host:port)")
        if self.kind == "grpc" and (self.plugins_dir is not None or self.args or self.env):
            raise ValueError("plugins_dir, args and env are for runners of kind langbot-plugins")
        return self

    def resolved_token(self, env: HostEnv) -> str | None:
        if self.id in env.runner_tokens:
            return env.runner_tokens[self.id]
        if self.auth_token_env:
            return os.environ.get(self.auth_token_env) or None
        return self.auth_token


Selector = list[str] | Literal["*"]
StorageArea = Literal["plugin", "workspace", "binding"]
RunOperation = Literal["get", "list", "events_page", "cancel", "append_result", "finalize"]
StateScopeName = Literal["conversation", "actor", "subject", "runner", "binding", "workspace"]

#: what a HostService client may do (`clients[].operations`)
ClientOperation = Literal[
    "run",
    "attach",
    "get",
    "cancel",
    "interact",
    "list_runners",
    "list_runs",
    "list_runtimes",
    "drain_runtime",
]
CLIENT_OPERATIONS: tuple[ClientOperation, ...] = get_args(ClientOperation)


class ClientConfig(CredentialFields):
    """A HostService client: its credentials and what it may do. A client may call an operation it is
    granted for events of the bots it may use, routed to the agents it may use; attach, get, cancel
    and interaction answers reach only runs of those bots and agents."""

    operations: list[ClientOperation] = Field(default_factory=lambda: list(CLIENT_OPERATIONS))
    bots: Selector = "*"
    agents: Selector = "*"

    @model_validator(mode="after")
    def _has_credentials(self) -> ClientConfig:
        if not (self.api_key_sha256 or self.api_key_env or self.tls_names):
            raise ValueError("a client needs api_key_sha256, api_key_env or tls_names")
        return self


class AuthConfig(_Strict):
    """Who may call HostService (`ProxyService` calls are authorized by their run token)."""

    #: calls without credentials: `loopback` accepts them from loopback peers while the host listens on
    #: a loopback address only (the demo and local development), with every operation; `none` refuses
    #: them. Unset: `loopback` when no clients are configured, else `none`.
    anonymous: Literal["loopback", "none"] | None = None
    clients: list[ClientConfig] = Field(default_factory=list)


class ResourcePolicy(_Strict):
    """Layer two of the authorization cut: what the agent allows, whatever the runner asks for."""

    models: Selector = "*"
    tools: Selector = Field(default_factory=list)
    knowledge_bases: Selector = "*"
    #: history / events / artifacts: grant what the manifest declares (True) or nothing (False)
    history: bool = True
    events: bool = True
    artifacts: bool = True
    #: largest artifact a run may upload (`UploadArtifact`), when the runner declares `artifacts: [write]`
    artifact_upload_max_bytes: int = Field(64 * 1024 * 1024, ge=0)
    cross_conversation: bool = False
    storage: list[StorageArea] = Field(default_factory=lambda: list[StorageArea](["plugin"]))
    runs: list[RunOperation] = Field(
        default_factory=lambda: list[RunOperation](["get", "list", "events_page", "cancel"])
    )
    prompt: bool = True
    platform_actions: list[str] = Field(default_factory=list)
    #: bots other than the run's own that platform actions / `send_message` may act as
    platform_bots: list[str] = Field(default_factory=list)
    #: opt-in: new input for a conversation with an open run of a runner that declares `steering` is
    #: queued into that run instead of starting a second run
    steering: bool = False


class StatePolicy(_Strict):
    scopes: list[StateScopeName] = Field(
        default_factory=lambda: list[StateScopeName](["conversation", "actor", "subject", "runner"])
    )


class DeliveryPolicy(_Strict):
    #: overrides the client's `supports_streaming` when set
    streaming: bool | None = None
    surface: str | None = None


class AgentModelOptionsConfig(_Strict):
    """Options the host applies to a run's model calls (under the request's own)."""

    extra_args: dict[str, Any] = Field(default_factory=dict)
    remove_think: bool = False


class SkillConfig(_Strict):
    """A skill the agent offers its runner (`Resources.skills`)."""

    name: str = Field(min_length=1)
    display_name: str = ""
    description: str = ""


class AgentConfig(_Strict):
    id: str = Field(min_length=1)
    runner_id: str = Field(min_length=1)
    runner_config: dict[str, Any] = Field(default_factory=dict)
    resource_policy: ResourcePolicy = Field(default_factory=ResourcePolicy)
    state_policy: StatePolicy = Field(default_factory=StatePolicy)
    delivery_policy: DeliveryPolicy = Field(default_factory=DeliveryPolicy)
    event_types: list[str] = Field(default_factory=lambda: ["message.received"])
    timeout_seconds: float = Field(300.0, gt=0)
    enabled: bool = True
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: the agent's prompt (`GetPrompt`): a list of `{role, content}` messages or one system string
    prompt: list[dict[str, Any]] | str = Field(default_factory=list)
    #: per-model request options applied host-side (model id or `*` -> options)
    model_options: dict[str, AgentModelOptionsConfig] = Field(default_factory=dict)
    #: request variables the operator sets for every run of this agent (`RunContext.variables`); they
    #: win over a client's envelope variables of the same name; sensitive keys are dropped all the same
    variables: dict[str, Any] = Field(default_factory=dict)
    #: skills offered to the runner (`Resources.skills`)
    skills: list[SkillConfig] = Field(default_factory=list)
    #: runtime labels a runtime must carry to run this agent (`workspace: team-a`); set, the agent's runs
    #: go to connected runtimes only (docs/runtimes.md)
    runtime_selector: dict[str, str] = Field(default_factory=dict)

    @field_validator("runtime_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return check_selector(value)

    @field_validator("runner_id")
    @classmethod
    def _runner_id_format(cls, value: str) -> str:
        from agentrunner.protocol import RUNNER_ID_PATTERN

        if not RUNNER_ID_PATTERN.match(value):
            raise ValueError("runner id must look like plugin:<author>/<name>/<runner>")
        return value


class BindingScope(_Strict):
    type: Literal["global", "workspace", "bot", "conversation"] = "global"
    id: str = ""

    @model_validator(mode="after")
    def _id_needed(self) -> BindingScope:
        if self.type != "global" and not self.id:
            raise ValueError(f"scope type {self.type!r} needs an id")
        if self.type == "global" and self.id:
            raise ValueError("a global scope takes no id")
        return self


class BindingTarget(_Strict):
    agent: str | None = None
    discard: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> BindingTarget:
        if bool(self.agent) == self.discard:
            raise ValueError("a target is either `agent: <id>` or `discard: true`")
        return self


class BindingConfig(_Strict):
    id: str = Field(min_length=1)
    scope: BindingScope = Field(default_factory=BindingScope)
    #: exact event type, a `prefix.*` pattern, or `*`
    event: str = "message.received"
    priority: int = 0
    target: BindingTarget
    enabled: bool = True

    @field_validator("event")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if value != "*" and ("*" in value[:-1] or (value.endswith("*") and not value.endswith(".*"))):
            raise ValueError("event pattern must be an exact type, `prefix.*` or `*`")
        if not value:
            raise ValueError("event pattern is empty")
        return value


class HostConfig(_Strict):
    #: stable id of this host instance (crash recovery only interrupts the runs it owns); defaults to
    #: the machine's hostname. Give each replica its own.
    instance_id: str = Field(default_factory=socket.gethostname, min_length=1)
    listen: ListenConfig = Field(default_factory=ListenConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    runtimes: RuntimesConfig = Field(default_factory=RuntimesConfig)
    runners: list[RunnerEndpointConfig] = Field(default_factory=list)
    agents: list[AgentConfig] = Field(default_factory=list)
    bindings: list[BindingConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    knowledge_bases: list[KnowledgeBaseConfig] = Field(default_factory=list)

    def agent(self, agent_id: str) -> AgentConfig | None:
        return next((a for a in self.agents if a.id == agent_id), None)


def patterns_overlap(a: str, b: str) -> bool:
    """Whether some event type matches both patterns."""
    if a == "*" or b == "*":
        return True
    if a.endswith(".*") and b.endswith(".*"):
        pa, pb = a[:-1], b[:-1]
        return pa.startswith(pb) or pb.startswith(pa)
    if a.endswith(".*"):
        return b.startswith(a[:-1])
    if b.endswith(".*"):
        return a.startswith(b[:-1])
    return a == b


def find_binding_ties(bindings: list[BindingConfig]) -> list[tuple[BindingConfig, BindingConfig]]:
    enabled = [b for b in bindings if b.enabled]
    out = []
    for i, a in enumerate(enabled):
        for b in enabled[i + 1 :]:
            if a.scope == b.scope and a.priority == b.priority and patterns_overlap(a.event, b.event):
                out.append((a, b))
    return out


class HostEnv(BaseModel):
    """Environment overrides for secrets and deployment values (`AGENTRUNNER_*`, any case; the dict
    fields as JSON objects); values passed to the constructor win. Read here rather than with
    pydantic-settings, which would load ~1.2 MiB of modules into every host for seven variables."""

    #: (a token's value never reaches an error message)
    model_config = ConfigDict(extra="ignore", protected_namespaces=(), hide_input_in_errors=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**_environment(type(self)), **values})

    database_url: str | None = None
    listen_address: str | None = None
    #: JSON object endpoint id -> bearer token, e.g. AGENTRUNNER_RUNNER_TOKENS='{"ref": "s3cret"}'
    runner_tokens: dict[str, str] = Field(default_factory=dict)
    #: the `base_url` of every model (e.g. a local OpenAI-compatible server), unless set per model below
    model_base_url: str | None = None
    #: JSON object model id -> base_url, e.g. AGENTRUNNER_MODEL_BASE_URLS='{"chat": "http://..."}'
    model_base_urls: dict[str, str] = Field(default_factory=dict)
    #: this host's `instance_id` (each replica its own)
    instance_id: str | None = None
    #: `console.address` (e.g. 127.0.0.1:8080)
    console_address: str | None = None


def _environment(model: type[BaseModel], prefix: str = "AGENTRUNNER_") -> dict[str, Any]:
    """`model`'s fields found in the environment as PREFIX + NAME (case-insensitive); a dict field's
    value parsed as JSON (a `ValueError` naming the variable when it does not parse)."""
    found = {key.upper(): value for key, value in os.environ.items()}
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        variable = f"{prefix}{name}".upper()
        if variable not in found:
            continue
        value: Any = found[variable]
        if get_origin(field.annotation) is dict:
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{variable}: not a JSON object ({exc})") from None
        out[name] = value
    return out


def cross_check(config: HostConfig) -> list[tuple[str, str]]:
    """Checks across sections: unique ids, binding targets, binding ties. Returns (path, reason) pairs."""
    problems: list[tuple[str, str]] = []
    for name in ("runners", "agents", "bindings", "models", "knowledge_bases"):
        seen: set[str] = set()
        for i, item in enumerate(getattr(config, name)):
            if item.id in seen:
                problems.append((f"{name}.{i}.id", f"duplicate id {item.id!r}"))
            seen.add(item.id)
    seen_clients: set[str] = set()
    for i, client in enumerate(config.auth.clients):
        if client.id in seen_clients:
            problems.append((f"auth.clients.{i}.id", f"duplicate id {client.id!r}"))
        seen_clients.add(client.id)
    seen_clients = set()
    for i, runtime_client in enumerate(config.runtimes.clients):
        if runtime_client.id in seen_clients:
            problems.append((f"runtimes.clients.{i}.id", f"duplicate id {runtime_client.id!r}"))
        seen_clients.add(runtime_client.id)
    problems.extend(_capability_problems(config))
    agent_ids = {a.id for a in config.agents}
    for i, binding in enumerate(config.bindings):
        if binding.target.agent and binding.target.agent not in agent_ids:
            problems.append((f"bindings.{i}.target.agent", f"unknown agent {binding.target.agent!r}"))
    index = {id(b): i for i, b in enumerate(config.bindings)}
    for a, b in find_binding_ties(config.bindings):
        problems.append(
            (
                f"bindings.{index[id(b)]}",
                f"ties with bindings.{index[id(a)]} ({a.id!r}): same scope "
                f"{a.scope.type}:{a.scope.id or '*'}, priority {a.priority}, overlapping events "
                f"{a.event!r}/{b.event!r}; give one a higher priority",
            )
        )
    return problems


def _capability_problems(config: HostConfig) -> list[tuple[str, str]]:
    """Checks the capability sections need beyond their field types."""
    problems: list[tuple[str, str]] = []
    kinds = {m.id: m.kind for m in config.models}
    names: set[str] = {"native"}
    for i, server in enumerate(config.tools.mcp_servers):
        where = f"tools.mcp_servers.{i}"
        if server.name in names:
            problems.append((f"{where}.name", f"duplicate tool source name {server.name!r}"))
        names.add(server.name)
        if server.transport == "stdio" and not server.command:
            problems.append((f"{where}.command", "a stdio MCP server needs `command`"))
        if server.transport == "streamable-http" and not server.url:
            problems.append((f"{where}.url", "a streamable-http MCP server needs `url`"))
        if server.cwd and not pathlib.Path(server.cwd).is_dir():
            problems.append((f"{where}.cwd", f"directory {server.cwd!r} does not exist"))
    for i, kb in enumerate(config.knowledge_bases):
        if kb.embedding_model and kinds.get(kb.embedding_model) != "openai-embedding":
            problems.append(
                (
                    f"knowledge_bases.{i}.embedding_model",
                    f"{kb.embedding_model!r} is not an embedding model of `models`",
                )
            )
    for i, agent in enumerate(config.agents):
        for model_id in agent.model_options:
            if model_id != "*" and model_id not in kinds:
                problems.append((f"agents.{i}.model_options.{model_id}", f"unknown model {model_id!r}"))
    return problems


def _format_errors(source: str, error: ValidationError) -> str:
    lines = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"{source}: {loc}: {err['msg']}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>", env: HostEnv | None = None) -> HostConfig:
    """Validates a loaded mapping; applies environment overrides."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: <root>: expected a mapping, got {type(data).__name__}")
    try:
        config = HostConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None
    problems = cross_check(config)
    if problems:
        raise ConfigError("\n".join(f"{source}: {loc}: {msg}" for loc, msg in problems))
    if env is None:
        try:
            env = HostEnv()
        except ValueError as exc:  # a JSON variable that does not parse
            raise ConfigError(f"environment: {' '.join(str(exc).split())}") from None
    if env.database_url:
        config.database.url = env.database_url
    if env.listen_address:
        config.listen.address = env.listen_address
    if env.instance_id:
        config.instance_id = env.instance_id
    if env.console_address:
        config.console.address = env.console_address
    unknown = sorted(set(env.model_base_urls) - {m.id for m in config.models})
    if unknown:
        raise ConfigError(f"AGENTRUNNER_MODEL_BASE_URLS: unknown model id(s) {unknown}")
    for model in config.models:
        url = env.model_base_urls.get(model.id) or env.model_base_url
        if url:
            model.base_url = url.rstrip("/")
    return config


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    """Reads and validates a YAML host config file."""
    source = str(path)
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: <file>: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<yaml>"
        raise ConfigError(f"{source}: {where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_config(data, source)
