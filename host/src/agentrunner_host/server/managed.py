"""Runner processes the host starts itself: `runners[]` entries of `kind: langbot-plugins`.

For each such entry the host starts `python -m agentrunner_runners.langbot_bridge --plugins <dir>` before
its registry first probes the endpoints, on the entry's `address` (a free loopback port is picked for
`:0`, and the entry's address set to it), and waits for the bridge's `AGENTRUNNER_LISTENING` line (its
plugins registered). The bridge is an ordinary runner endpoint from then on.

- **Never the host's downfall**: a bridge that fails to start or exits is logged
  (`runner.managed_exited`) and started again with capped exponential backoff on the same address; its
  runners are down meanwhile, like any endpoint's.
- **Never outlives the host**: its stdin is a pipe from the host (`--watch-stdin`), so it stops when the
  host dies, however it dies; `stop()` sends SIGTERM (the bridge drains its runs and stops the plugin
  runtime) and SIGKILL after a grace.
- **No secrets**: the bridge sees the basics of the environment (PATH, HOME, locale, proxies, the
  Python path, the host's TLS files for its ProxyService calls) and the variables the entry names in
  `env`, nothing else (no model API keys, no console token, not the CLI's `AGENTRUNNER_HOST_API_KEY`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from typing import IO

import structlog

from agentrunner_host.config.model import HostConfig, RunnerEndpointConfig

log = structlog.get_logger("agentrunner_host.server.managed")

READY_PREFIX = b"AGENTRUNNER_LISTENING"
START_TIMEOUT = 120.0
STOP_GRACE = 10.0
_ENV_BASICS = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "PIP_INDEX_URL",
    # the TLS files for the bridge's ProxyService calls to this host (the SDK reads them); not the CLI's
    # AGENTRUNNER_HOST_API_KEY(_FILE), a client credential the bridge has no use for
    "AGENTRUNNER_HOST_CA_FILE",
    "AGENTRUNNER_HOST_CERT_FILE",
    "AGENTRUNNER_HOST_KEY_FILE",
    "AGENTRUNNER_HOST_SERVER_NAME",
)
_ENV_PREFIXES = ("LC_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "OTEL_")


def bridge_env(entry: RunnerEndpointConfig, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment a managed bridge gets (see the module docstring)."""
    named = set(entry.env)
    out = {
        k: v
        for k, v in environ.items()
        if k in _ENV_BASICS or k in named or k.upper().startswith(_ENV_PREFIXES)
    }
    out["AGENTRUNNER_LOG_FORMAT"] = environ.get("AGENTRUNNER_LOG_FORMAT", "json")
    return out


def entry_problems(config: HostConfig) -> list[tuple[str, str]]:
    """What is wrong with the managed entries before anything starts, as `(config path, reason)`: a
    `plugins_dir` that is not a directory (a path is relative to the host's working directory). `serve`
    refuses to start on one and `config check` reports it; a directory that goes away later is only a
    bridge that fails to start (retried, its runners down)."""
    return [
        (f"runners.{i}.plugins_dir", f"{str(e.plugins_dir)!r} is not a directory ({e.plugins_dir.resolve()})")
        for i, e in enumerate(config.runners)
        if e.kind == "langbot-plugins" and e.plugins_dir is not None and not e.plugins_dir.is_dir()
    ]


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host.strip("[]"), 0))
        return int(sock.getsockname()[1])


class ManagedRunner:
    """One started bridge, supervised. Its stderr (the bridge's and the plugin runtime's logs) is the
    host's, or a temporary file when `capture` (`config check`: `start_error` reads it)."""

    def __init__(self, entry: RunnerEndpointConfig, *, capture: bool = False) -> None:
        self.entry = entry
        self.stderr: IO[bytes] | None = tempfile.TemporaryFile() if capture else None
        host, _, port = entry.address.rpartition(":")
        self.host = host or "127.0.0.1"
        self.port = int(port) if port.isdigit() and int(port) else _free_port(self.host)
        entry.address = f"{self.host}:{self.port}"
        self.process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def command(self) -> list[str]:
        assert self.entry.plugins_dir is not None
        return [
            sys.executable, "-m", "agentrunner_runners.langbot_bridge",
            "--plugins", str(self.entry.plugins_dir.resolve()),
            "--host", self.host, "--port", str(self.port), "--watch-stdin",
            *self.entry.args,
        ]  # fmt: skip

    async def _launch(self) -> bool:
        """Starts the bridge; True once it printed its ready line."""
        self.process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.stderr,
            env=bridge_env(self.entry),
            start_new_session=True,
        )
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while line := await self.process.stdout.readline():
                    if line.startswith(READY_PREFIX):
                        log.info("runner.managed_started", endpoint=self.entry.id, address=self.entry.address)
                        return True
        except TimeoutError:
            log.error("runner.managed_start_timeout", endpoint=self.entry.id, waited=START_TIMEOUT)
            await self._terminate()
        return False

    async def start(self) -> None:
        """Launches it and waits for it (or its failure); then supervises it in the background."""
        try:
            await self._launch()
        except OSError as exc:
            log.error("runner.managed_start_failed", endpoint=self.entry.id, error=str(exc)[:300])
        self._task = asyncio.create_task(self._supervise(), name=f"managed-runner-{self.entry.id}")

    async def _supervise(self) -> None:
        delay = 1.0
        while not self._stopping:
            if self.process is not None:
                assert self.process.stdout is not None
                with contextlib.suppress(Exception):
                    while await self.process.stdout.read(65536):  # the bridge writes nothing more; drained
                        pass
                code = await self.process.wait()
                if self.stopping:
                    return
                log.error("runner.managed_exited", endpoint=self.entry.id, code=code, restart_in=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)
            with contextlib.suppress(OSError):
                if await self._launch():
                    delay = 1.0

    @property
    def stopping(self) -> bool:
        return self._stopping

    def start_error(self) -> str:
        """The bridge's last one-line `error: ...` from its captured stderr ("" when none)."""
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").splitlines()
        return next((line for line in reversed(lines) if line.startswith("error: ")), "")

    async def _terminate(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            await process.wait()

    async def stop(self) -> None:
        self._stopping = True
        await self._terminate()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.stderr is not None:
            self.stderr.close()


class ManagedRunners:
    """Every managed runner of a host config."""

    def __init__(self, runners: list[ManagedRunner]) -> None:
        self.runners = runners

    @classmethod
    async def start(cls, config: HostConfig, *, capture: bool = False) -> ManagedRunners:
        """Starts the managed runners (concurrently); sets each entry's address to where it listens."""
        runners = [ManagedRunner(e, capture=capture) for e in config.runners if e.kind == "langbot-plugins"]
        await asyncio.gather(*(r.start() for r in runners))
        return cls(runners)

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.runners))
