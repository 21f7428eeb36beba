"""Running a harness CLI as a child process the run owns.

- Own process group (`start_new_session`), so stopping it reaches everything it spawned (unless a
  descendant leaves the group with `setsid`; no portable API prevents that).
- Explicit environment (`harness_env`): an allowlist of the runner's variables plus the runner config's
  `env-json`; nothing else of the runner's (or the host's) environment is inherited.
- Prompt on stdin, never in argv (argv is visible to every user of the machine).
- stdout read as records split on `\\n` only (`Records`): U+2028 / U+2029 or `\\r` inside a JSON string
  are not line breaks; records up to 16 MiB, a longer one is skipped with a warning.
- stderr kept bounded (the last 64 KiB) and redacted when read (`stderr_text`, `stderr_excerpt`).
- `stop()` (also on leaving `async with`, on cancellation and on timeout): SIGTERM to the group and to
  the processes that left it (a CLI that starts helpers in sessions of their own): its descendants, and
  any process carrying the harness's `AGENTRUNNER_HARNESS_PROCESS` marker in its environment (found even
  after the CLI exited and they were re-parented), SIGKILL after a grace period to whatever is left; the processes of every open harness are also killed when
  the runner process exits (`kill_all`, registered with `atexit`).
- `secret_names(env)`: the variables of an environment whose names look secret, for a CLI's own
  "keep these from the commands the model runs" setting (the harness needs its API key; the shell
  commands its model runs do not).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness.procfs import (
    any_alive,
    descendants,
    group_alive,
    pgid_of,
    signal_all,
    signal_group,
    with_env,
)
from agentrunner.harness.redact import Redactor
from agentrunner.protocol import is_sensitive_variable

log = structlog.get_logger("agentrunner.harness.process")

#: variables of the runner's environment a harness gets by default (plus `LC_*`)
BASE_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
#: an admin can let more variables through, comma separated (e.g. `ANTHROPIC_API_KEY`)
PASSTHROUGH_ENV = "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH"
#: a random id per harness process in its environment: what it starts inherits it (not a secret)
MARKER_ENV = "AGENTRUNNER_HARNESS_PROCESS"
MAX_RECORD_BYTES = 16 * 1024 * 1024
STDERR_LIMIT = 64 * 1024
_READ_CHUNK = 256 * 1024

_LIVE: dict[int, HarnessProcess] = {}


def harness_env(
    extra: Mapping[str, str] | None = None,
    *,
    allow: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a harness: allowed variables of `environ` (the runner's), then `extra`
    (the config's `env-json`, which wins). `allow` adds names for one harness (e.g. its API key)."""
    source = os.environ if environ is None else environ
    names = set(BASE_ENV_ALLOWLIST) | set(allow)
    names |= {n.strip() for n in source.get(PASSTHROUGH_ENV, "").split(",") if n.strip()}
    env = {k: v for k, v in source.items() if k in names or k.startswith("LC_")}
    for key, value in (extra or {}).items():
        env[str(key)] = str(value)
    return env


def secret_names(env: Mapping[str, str]) -> list[str]:
    """The names in `env` that look secret (`*_API_KEY`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, ...), sorted."""
    return sorted(name for name in env if is_sensitive_variable(name))


@dataclasses.dataclass(slots=True)
class ProcessSpec:
    """What to start: argv, working directory, the complete environment and the stdin payload.

    `stdin=None` keeps stdin open for `HarnessProcess.write` (a JSON-RPC harness); bytes are written
    and stdin closed (a prompt).
    """

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    stdin: bytes | None = b""
    #: seconds between SIGTERM and SIGKILL
    grace: float = 3.0


class HarnessTimeout(Exception):
    """The harness produced nothing before the deadline."""


class HarnessCancelled(Exception):
    """The run was cancelled while waiting for the harness."""


class Records:
    """Splits a byte stream into records on `\\n` only; records longer than `limit` are skipped."""

    def __init__(self, limit: int = MAX_RECORD_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._skipping = False
        self.skipped = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Takes the next chunk of the stream; returns the records it completed (a partial record waits for
        the next chunk)."""
        out: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._append(chunk[start:])
                return out
            self._append(chunk[start:end])
            if self._skipping:
                self._skipping = False
            else:
                out.append(bytes(self._buffer))
            self._buffer.clear()
            start = end + 1

    def _append(self, piece: bytes) -> None:
        if self._skipping or not piece:
            return
        if len(self._buffer) + len(piece) > self.limit:
            self._buffer.clear()
            self._skipping = True
            self.skipped += 1
            log.warning("harness output record over the size limit skipped", limit=self.limit)
            return
        self._buffer += piece

    def close(self) -> list[bytes]:
        """The last record when the stream ended without a newline."""
        rest = b"" if self._skipping else bytes(self._buffer)
        self._buffer.clear()
        return [rest] if rest.strip() else []


class HarnessProcess:
    """One harness process of a run: `async with HarnessProcess(spec, ...) as proc:`.

    Starting failures become `RunnerFailure`s with kind `start_failed` and the codes
    `<prefix>.command_not_found`, `<prefix>.permission_denied` or `<prefix>.start_failed`.
    """

    def __init__(
        self, spec: ProcessSpec, *, redactor: Redactor | None = None, prefix: str = "harness"
    ) -> None:
        self.spec = spec
        self.redactor = redactor or Redactor()
        self.prefix = prefix
        self.proc: asyncio.subprocess.Process | None = None
        self.pgid: int | None = None
        self._stderr = bytearray()
        self._stderr_dropped = 0
        self._stderr_task: asyncio.Task[None] | None = None
        self._stdin_task: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(64)
        self.records_skipped = 0
        self.marker = secrets.token_hex(8)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> HarnessProcess:
        """Starts the subprocess in its own process group (so the whole tree can be signalled); raises a
        `RunnerFailure` naming the command when it cannot be executed."""
        spec = self.spec
        command = spec.argv[0]
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                cwd=str(spec.cwd),
                env={**spec.env, MARKER_ENV: self.marker},
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError:
            raise RunnerFailure(
                f"{self.prefix}.command_not_found",
                f"command {command!r} was not found (is it installed and on PATH?)",
                kind=FailureKind.START_FAILED,
                details={"command": command},
            ) from None
        except PermissionError:
            raise RunnerFailure(
                f"{self.prefix}.permission_denied",
                f"command {command!r} is not executable by the runner",
                kind=FailureKind.START_FAILED,
                details={"command": command},
            ) from None
        except OSError as exc:
            raise RunnerFailure(
                f"{self.prefix}.start_failed",
                self.redactor(f"command {command!r} could not start: {exc.strerror or exc}"),
                kind=FailureKind.START_FAILED,
                details={"command": command},
            ) from None
        self.pgid = self.proc.pid
        _LIVE[self.proc.pid] = self
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        if spec.stdin is not None:
            self._stdin_task = asyncio.create_task(self._feed_stdin(spec.stdin))
        return self

    async def __aenter__(self) -> HarnessProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def pid(self) -> int | None:
        """The subprocess's pid, or None before it started."""
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The subprocess's exit status, or None while it runs (or before it started)."""
        return self.proc.returncode if self.proc is not None else None

    # -- io -----------------------------------------------------------------------------------------

    async def _feed_stdin(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        stdin = self.proc.stdin
        try:
            if data:
                stdin.write(data)
                await stdin.drain()
            stdin.close()
            await stdin.wait_closed()
        except (BrokenPipeError, ConnectionResetError):
            log.info("harness closed stdin before reading all of it")

    async def write(self, data: bytes) -> None:
        """Writes to the harness's stdin (kept open when `spec.stdin` is None)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(_READ_CHUNK):
            self._stderr += chunk
            over = len(self._stderr) - STDERR_LIMIT
            if over > 0:
                del self._stderr[:over]
                self._stderr_dropped += over

    async def records(self) -> AsyncIterator[bytes]:
        """stdout records (without the newline) until the harness closes stdout."""
        assert self.proc is not None and self.proc.stdout is not None
        splitter = Records()
        try:
            while chunk := await self.proc.stdout.read(_READ_CHUNK):
                for record in splitter.feed(chunk):
                    yield record
            for record in splitter.close():
                yield record
        finally:
            self.records_skipped = splitter.skipped

    async def next_record(
        self, *, deadline: float | None = None, cancelled: asyncio.Event | None = None
    ) -> bytes | None:
        """The next stdout record, or None at the end of stdout.

        Raises `HarnessTimeout` when the monotonic `deadline` passes first and `HarnessCancelled` when
        `cancelled` is set first. Never wraps a caller's `yield` in a timeout (safe in generators).
        """
        if self._pump is None:
            self._pump = asyncio.create_task(self._pump_records())
        getter = asyncio.ensure_future(self._queue.get())
        waiters: set[asyncio.Future[Any]] = {getter}
        watcher = None
        if cancelled is not None:
            watcher = asyncio.ensure_future(cancelled.wait())
            waiters.add(watcher)
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                if not w.done():
                    w.cancel()
        if getter in done:
            item = getter.result()
            if isinstance(item, BaseException):
                raise item
            return item
        if watcher is not None and watcher in done:
            raise HarnessCancelled()
        raise HarnessTimeout()

    async def _pump_records(self) -> None:
        try:
            async for record in self.records():
                await self._queue.put(record)
        except Exception as exc:  # a broken pipe: surfaces at the reader's next call
            await self._queue.put(exc)
        await self._queue.put(None)

    async def wait(self) -> int:
        """The exit status (after stderr is drained, so `stderr_text` is complete)."""
        assert self.proc is not None
        code = await self.proc.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 2.0)
        return code

    def stderr_text(self) -> str:
        """The kept stderr (the last 64 KiB), decoded and redacted."""
        text = self._stderr.decode("utf-8", errors="replace")
        if self._stderr_dropped:
            text = f"[... {self._stderr_dropped} earlier bytes dropped]\n" + text
        return self.redactor(text)

    def stderr_excerpt(self, limit: int = 2000) -> str:
        """The end of stderr for an error message: redacted, at most `limit` characters."""
        text = self.redactor(self._stderr.decode("utf-8", errors="replace")).strip()
        return text if len(text) <= limit else "…" + text[-(limit - 1) :]

    # -- stopping -----------------------------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after `grace` to anything left; safe to call repeatedly and
        from a cancelled task (a second cancellation escalates to SIGKILL at once)."""
        if self.proc is None or self.pgid is None:
            return
        pgid = self.pgid
        # descendants that left the group (setsid) are found before the group goes: once their parent
        # is gone they are re-parented and nothing links them to this harness any more
        found = {*descendants(self.proc.pid), *with_env(MARKER_ENV, self.marker)} - {self.proc.pid}
        strays = [pid for pid in found if pgid_of(pid) != pgid]
        try:
            if group_alive(pgid) or any_alive(strays):
                signal_group(pgid, signal.SIGTERM)
                signal_all(strays, signal.SIGTERM)
                deadline = time.monotonic() + self.spec.grace
                # polled: descendants of the group are not our children, nothing signals their exit
                while (group_alive(pgid) or any_alive(strays)) and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            if group_alive(pgid) or any_alive(strays):
                log.info("harness ignored SIGTERM; killing its process group", pgid=pgid)
                signal_group(pgid, signal.SIGKILL)
                signal_all(strays, signal.SIGKILL)
            for task in (self._stdin_task, self._stderr_task, self._pump):
                if task is not None and not task.done():
                    task.cancel()
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self.proc.wait(), 2.0)
            _LIVE.pop(self.proc.pid, None)
            self.pgid = None


def kill_all() -> None:
    """SIGKILL to the groups of every harness still open in this process (runner shutdown)."""
    for process in list(_LIVE.values()):
        if process.pgid is not None:
            signal_group(process.pgid, signal.SIGKILL)
    _LIVE.clear()


def live_process_groups() -> list[int]:
    """Process groups of the harnesses open in this process (diagnostics and tests)."""
    return [p.pgid for p in _LIVE.values() if p.pgid is not None]


atexit.register(kill_all)
