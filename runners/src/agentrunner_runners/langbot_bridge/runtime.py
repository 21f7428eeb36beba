"""The public plugin runtime as a supervised child process, and runs admitted into it.

- **Start**: `python -m langbot_plugin.cli.__init__ rt -s` in the bridge's work directory (`plugins.py`
  lays out `data/plugins/`), stdin/stdout as the control connection (`peer.py`), a minimal environment
  (no secrets of the bridge's own environment reach the runtime or the plugin workers it starts), the
  runtime's plugin debug listener moved to a free port (`--ws-debug-port 0`; the bridge never issues the
  debug keys it would accept), tied to the bridge's life (`launch.py`: SIGTERM when the bridge dies,
  even by SIGKILL; the runtime stops its workers on SIGTERM). Handshake: `set_runtime_config` (profile `oss_dev`), then a first tenant
  action with the bridge's one installation binding, which makes the runtime start its plugin workers.
- **Ready**: when every plugin found has registered (`list_plugins`), or after the start-up timeout
  with whatever registered; discovery then asks for every component kind of `kinds.py`.
- **Runs**: the runtime accepts 128 concurrent actions per connection and refuses the 129th; the bridge
  admits at most `max_in_flight` (120, room left for discovery) and queues the rest in arrival order, and
  a "busy" answer anyway (the runtime still finishing cancelled actions) puts the run back in the queue
  instead of failing it. A run that finds its plugin's worker restarting (the runtime answers
  `runner.plugin_not_found` / `not_initialized` before any result) waits for the worker to register
  again (at most `restart_wait` seconds, within the run's deadline) and is sent once more.
- **Crashes**: a plugin worker that dies is restarted by the runtime itself (1 s backoff, doubling); its
  open runs end `run.failed` (`runner.forward_exception`, mapped to `langbot.plugin_crashed`, retryable).
  A runtime that dies fails its open runs (`langbot.runtime_crashed`, retryable) and is restarted by the
  bridge with capped exponential backoff; runs arriving meanwhile wait for it (within their deadline).
  Closing the bridge stops the runtime's whole process group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog

from agentrunner_runners.langbot_bridge.kinds import ComponentKind, installed_kinds, unknown_action
from agentrunner_runners.langbot_bridge.peer import ActionError, PeerClosed, RuntimePeer
from agentrunner_runners.langbot_bridge.plugins import Plugin, lay_out
from agentrunner_runners.langbot_bridge.wire import MAX_LINE_BYTES

log = structlog.get_logger("agentrunner_runners.langbot_bridge.runtime")

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], Awaitable[Any]]

#: the runtime refuses the 129th concurrent action of a connection; discovery keeps a few for itself
MAX_IN_FLIGHT = 120
RESTARTING = frozenset(
    {
        "runner.plugin_not_found",
        "runner.plugin_not_initialized",
        "runner.handler_not_found",
        "runner.not_initialized",
    }
)
#: environment variables the runtime (and the pip it runs for plugin requirements) may see
_ENV_KEEP = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_INDEX_URL",
)
_ENV_PREFIXES = ("LC_", "LANGBOT_PLUGIN_PYPI", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")
_BUSY_BACKOFF = 0.05


def runtime_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    keep = {k: v for k, v in environ.items() if k in _ENV_KEEP or k.upper().startswith(_ENV_PREFIXES)}
    keep["PYTHONUNBUFFERED"] = "1"
    return keep


def binding(instance: str) -> dict[str, Any]:
    """The one installation binding every tenant action of the bridge carries."""
    return {
        "instance_uuid": instance,
        "workspace_uuid": "agentrunner-bridge",
        "placement_generation": 1,
        "installation_uuid": "agentrunner-bridge",
        "runtime_revision": 1,
        "artifact_digest": hashlib.sha256(instance.encode()).hexdigest(),
    }


class RuntimeUnavailable(ConnectionError):
    """The runtime is not running (starting, restarting or stopped) and did not come back in time."""


class PluginRuntime:
    """One supervised runtime process serving the plugins of one directory."""

    def __init__(
        self,
        plugins: list[Plugin],
        work_dir: Path,
        handler: Handler,
        *,
        skip_deps_check: bool = False,
        max_in_flight: int = MAX_IN_FLIGHT,
        restart_wait: float = 30.0,
    ) -> None:
        self.plugins = plugins
        self.work_dir = work_dir
        self._handler = handler
        self._skip_deps = skip_deps_check
        self._slots = asyncio.Semaphore(max_in_flight)
        self.restart_wait = restart_wait
        self.instance = f"bridge-{os.getpid()}-{int(time.time())}"
        self.peer: RuntimePeer | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._ready = asyncio.Event()
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None
        self.restarts = 0
        self.on_restart: Callable[[], Awaitable[None]] | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self, startup_timeout: float) -> None:
        """Starts the runtime and waits until its plugins registered (or the timeout passed)."""
        lay_out(self.plugins, self.work_dir)
        started = asyncio.get_running_loop().create_future()
        self._supervisor = asyncio.create_task(self._supervise(started), name="langbot-runtime")
        await started
        await self.wait_registered(startup_timeout)

    async def _spawn(self) -> tuple[asyncio.subprocess.Process, RuntimePeer, asyncio.Task[None]]:
        args = ["-m", "langbot_plugin.cli.__init__", "rt", "-s", "--ws-debug-port", "0"]
        if self._skip_deps:
            args.append("--skip-deps-check")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentrunner_runners.langbot_bridge.launch",  # the runtime gets SIGTERM if the bridge dies
            str(os.getpid()),
            *args,
            cwd=self.work_dir,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=runtime_env(),
            limit=MAX_LINE_BYTES,
            start_new_session=True,
        )
        assert process.stdout is not None and process.stdin is not None
        peer = RuntimePeer(process.stdout, process.stdin, self._handler, binding=binding(self.instance))
        reader = asyncio.create_task(peer.run(), name="langbot-runtime-reader")
        try:
            await self._handshake(peer)
        except BaseException:
            reader.cancel()
            await self._stop_process(process)
            raise
        return process, peer, reader

    async def _handshake(self, peer: RuntimePeer) -> None:
        policy = {
            "max_cpus": 1,
            "max_memory_mb": 1024,
            "max_pids": 512,
            "max_open_files": 4096,
            "max_file_size_mb": 256,
        }
        config = {
            "runtime_identity": {"instance_uuid": self.instance, "runtime_id": self.instance},
            "worker_policy": {
                **policy,
                "max_workers": max(16, len(self.plugins)),
                "max_total_cpus": max(16.0, len(self.plugins)),
                "max_total_memory_mb": 1024 * max(16, len(self.plugins)),
            },
            "runtime_profile": "oss_dev",
        }
        await peer.call("set_runtime_config", config, scoped=False, within=60)
        await peer.call("list_plugins", {}, within=60)  # the first tenant action starts the workers

    async def _supervise(self, started: asyncio.Future[None]) -> None:
        delay = 1.0
        while not self._closing:
            began = time.monotonic()
            try:
                self.process, self.peer, reader = await self._spawn()
            except Exception as exc:
                if not started.done():
                    started.set_exception(exc)
                    return
                log.error("langbot.runtime_start_failed", error=str(exc)[:300])
            else:
                self._ready.set()
                if not started.done():
                    started.set_result(None)
                elif self.on_restart is not None:
                    await self.on_restart()
                await reader
                self._ready.clear()
                if self.closing:
                    return
                code = await self._stop_process(self.process)
                self.restarts += 1
                log.error("langbot.runtime_exited", code=code, restart_in=delay)
            delay = 1.0 if time.monotonic() - began > 60 else delay
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _stop_process(self, process: asyncio.subprocess.Process) -> int | None:
        """Ends the runtime and every worker it started (its process group): SIGTERM, then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), wait)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # workers left behind by a runtime that exited first
        return process.returncode

    @property
    def closing(self) -> bool:
        return self._closing

    async def close(self) -> None:
        self._closing = True
        if self.process is not None:
            await self._stop_process(self.process)
        if self.peer is not None:
            await self.peer.aclose()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)

    # -- discovery --------------------------------------------------------------------------------
    async def _peer(self, within: float) -> RuntimePeer:
        try:
            async with asyncio.timeout(max(within, 0.0)):
                await self._ready.wait()
        except TimeoutError:
            raise RuntimeUnavailable("the plugin runtime is not running") from None
        assert self.peer is not None
        return self.peer

    async def registered(self) -> set[str]:
        """The plugins whose workers registered and initialized."""
        peer = await self._peer(10.0)
        answer = await peer.call("list_plugins", {})
        out = set()
        for plugin in answer.get("plugins") or []:
            if (
                not isinstance(plugin, dict)
                or plugin.get("status") != "initialized"
                or not plugin.get("enabled")
            ):
                continue
            manifest = plugin.get("manifest") or {}
            meta = (manifest.get("manifest") or manifest).get(
                "metadata"
            ) or {}  # a component manifest wraps it
            out.add(f"{meta.get('author')}/{meta.get('name')}")
        return out

    async def wait_registered(self, within: float, plugin_ids: set[str] | None = None) -> set[str]:
        """Waits until `plugin_ids` (default: all) registered or `within` seconds passed; returns those that did."""
        wanted = plugin_ids if plugin_ids is not None else {p.plugin_id for p in self.plugins}
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        found: set[str] = set()
        while True:
            with contextlib.suppress(ActionError, PeerClosed, RuntimeUnavailable, TimeoutError):
                found = await self.registered()
            if wanted <= found or loop.time() >= until:
                missing = sorted(wanted - found)
                if missing:
                    log.warning("langbot.plugins_not_registered", missing=missing, waited=within)
                return found & wanted
            await asyncio.sleep(0.2)

    async def discover(self) -> list[tuple[ComponentKind, dict[str, Any]]]:
        """Every runner entry of every component kind the runtime knows."""
        peer = await self._peer(30.0)
        entries: list[tuple[ComponentKind, dict[str, Any]]] = []
        for kind in installed_kinds():
            try:
                answer = await peer.call(kind.list_action, {})
            except ActionError as exc:
                if not unknown_action(exc.message):
                    log.warning("langbot.discovery_failed", kind=kind.name, error=exc.message[:200])
                continue
            entries.extend((kind, e) for e in answer.get("runners") or [] if isinstance(e, dict))
        return entries

    # -- runs -------------------------------------------------------------------------------------
    async def run(
        self, kind: ComponentKind, author: str, plugin: str, runner: str, context: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The run's result envelopes, admitted when a slot is free; ends after the runtime's end frame."""
        deadline = (context.get("runtime") or {}).get("deadline_at")
        request = {"plugin_author": author, "plugin_name": plugin, "runner_name": runner, "context": context}
        async with self._slots:
            retried = False
            attempt = 0
            while True:
                peer = await self._peer(self._left(deadline, self.restart_wait))
                stream = peer.stream(kind.run_action, request)
                try:
                    first = await anext(stream, None)
                except ActionError as exc:
                    if not exc.busy:
                        raise
                    attempt += 1
                    await asyncio.sleep(min(_BUSY_BACKOFF * attempt, 1.0))
                    continue
                if not retried and _restarting(first):
                    retried = True
                    await stream.aclose()
                    await self.wait_registered(
                        self._left(deadline, self.restart_wait), {f"{author}/{plugin}"}
                    )
                    continue
                try:
                    if first is not None:
                        yield first
                    async for item in stream:
                        yield item
                finally:
                    await stream.aclose()
                return

    @staticmethod
    def _left(deadline: Any, cap: float) -> float:
        if not isinstance(deadline, int | float):
            return cap
        return max(0.0, min(cap, float(deadline) - time.time() - 0.5))


def _restarting(envelope: dict[str, Any] | None) -> bool:
    if envelope is None or envelope.get("type") != "run.failed":
        return False
    data = envelope.get("data") or {}
    return isinstance(data, dict) and data.get("code") in RESTARTING
