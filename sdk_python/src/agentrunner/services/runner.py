"""`ServiceRunner`: the run flow every external-service runner shares, so a runner only speaks its wire.

A subclass sets `provider` (the code prefix: `dify` -> `dify.timeout`) and implements
`exchange(ctx, turn)`: send the request through `turn.upstream`, feed what comes back to `turn.answer`
(increments, snapshots or the end-only answer), and record external ids with `turn.ids.set(...)` and
usage with `turn.usage`. The base class does the rest, once for all services:

1. one guard around the exchange: the run's remaining time bounds it (`<provider>.timeout`, retryable)
   and a host cancel ends it at once (the upstream request is closed, the run fails with `cancelled`);
2. a `ServiceError` with `stale_id=True` (the service no longer knows the stored conversation) before
   any answer went out: the stored ids are dropped and the turn is retried once, fresh;
3. success: the answer closes by the delta policy (`answer.py`), with `state.updated` for external ids
   that changed, written only now that the output succeeded; an empty answer is
   `<provider>.empty_response` (unless the exchange marked the run `acknowledged`);
4. failure: one `run.failed` (`<provider>.<reason>`, `retryable`, `details.kind`, usage when known),
   its message with every secret of the config redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, ClassVar

import structlog

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.failures import FailureKind
from agentrunner.protocol import FINISH_ACKNOWLEDGED
from agentrunner.runner import Runner
from agentrunner.services.answer import AnswerStream
from agentrunner.services.errors import Redactor, ServiceError
from agentrunner.services.http import Upstream
from agentrunner.v1 import common_pb2, manifest_pb2, result_pb2

__all__ = ["ExternalIds", "ServiceRunner", "ServiceTurn"]

log = structlog.get_logger("agentrunner.services")

#: The guard ends the exchange this long before the run deadline, so `<provider>.timeout` (not the
#: SDK's generic `deadline_exceeded`) reaches the host.
DEADLINE_MARGIN = 0.3
CANCELLED = "cancelled"


class ExternalIds:
    """External ids kept in host state (conversation scope), e.g. `external.conversation_id`.

    `get` reads the value stored when the run started (None on a fresh retry, or when `valid` rejects
    it); `set` records the value the service returned. `updates()` are the `state.updated` results for
    keys whose value changed (a dropped stale id without a replacement is deleted).
    """

    def __init__(self, stored: Mapping[str, Any], *, fresh: bool = False) -> None:
        self._stored = dict(stored)
        self.fresh = fresh
        self._new: dict[str, str] = {}
        self._read: set[str] = set()

    def get(self, key: str, valid: Any = None) -> str | None:
        """The id stored when the run started, or None (a fresh retry, nothing stored, or `valid` rejects it).
        Reading a key marks it, so a fresh retry can delete the ids it no longer trusts."""
        self._read.add(key)
        if self.fresh:
            return None
        value = self._stored.get(key)
        if not isinstance(value, str) or not value:
            return None
        if valid is not None and not valid(value):
            return None
        self.used_stored = True
        return value

    used_stored = False

    def set(self, key: str, value: str | None) -> None:
        """Records the id the service returned (an empty value records nothing)."""
        if value:
            self._new[key] = value

    def value(self, key: str) -> str | None:
        """The id this turn uses now: the one the service returned, else the stored one."""
        return self._new.get(key) or self.get(key)

    def updates(self) -> list[result_pb2.RunResult]:
        """The `state.updated` results for ids that changed, plus deletions of stored ids a fresh retry read
        and did not replace (a stale id must not be reused by the next run)."""
        out = []
        for key, value in self._new.items():
            if self._stored.get(key) != value:
                out.append(results.state("conversation", key, value))
        if self.fresh:
            for key in sorted(self._read - set(self._new)):
                if self._stored.get(key):
                    out.append(results.state("conversation", key, None))
        return out


class ServiceTurn:
    """One attempt at a turn: the upstream, the answer being assembled, ids, usage and metadata."""

    def __init__(self, ctx: RunContext, upstream: Upstream, *, streaming: bool, fresh: bool) -> None:
        self.ctx = ctx
        self.upstream = upstream
        self.answer = AnswerStream(ctx.emit, streaming=streaming)
        self.ids = ExternalIds(ctx.state.conversation, fresh=fresh)
        self.usage: common_pb2.Usage | None = None
        self.metadata: dict[str, Any] = {}
        self.finish_reason = "stop"
        self.acknowledged = ""

    @property
    def streaming(self) -> bool:
        """Whether the answer is streamed to the user as deltas (else sent whole at the end)."""
        return self.answer.streaming

    def set_usage(
        self,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        total_tokens: int | None = None,
    ) -> None:
        """Usage the service reported (unknown counts stay unset, never zero)."""
        if prompt_tokens is None and completion_tokens is None and total_tokens is None:
            return
        self.usage = results.usage(prompt_tokens, completion_tokens, total_tokens)

    def acknowledge(self, text: str) -> None:
        """The service only acknowledged the request (it answers asynchronously, elsewhere): the run
        completes with `finish_reason` `acknowledged` and no answer."""
        self.acknowledged = text or "acknowledged"


class ServiceRunner(Runner):
    """Base class of the external-service runners (see the module docstring)."""

    provider: ClassVar[str] = ""
    #: Per-operation timeout when the config has no `timeout`.
    default_timeout: ClassVar[float] = 120.0

    # -- hooks --------------------------------------------------------------------------------

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:  # pragma: no cover - abstract
        """Talks to the service for one run: sends the input, feeds the answer into `turn.answer`, records ids
        and usage on `turn`; raises `ServiceError` for the service's failures."""
        raise NotImplementedError

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        """The service's business error in a JSON body (2xx or not); None when the body is not one."""
        return None

    def streaming(self, ctx: RunContext) -> bool:
        """Stream when the surface can and the config's `streaming` (when declared) allows it."""
        return (
            bool(ctx.delivery.supports_streaming) and config_value(ctx.config, "streaming", True) is not False
        )

    def timeout(self, ctx: RunContext) -> float:
        """Seconds each operation with the service may take: the config's `timeout`, else `default_timeout`."""
        value = config_value(ctx.config, "timeout")
        return float(value) if isinstance(value, int | float) and value > 0 else self.default_timeout

    def secrets(self, ctx: RunContext) -> Iterable[str]:
        """Config values to redact: every field the manifest declares as `secret`."""
        schema = self.get_manifest().config_schema
        values = (
            config_value(ctx.config, f.name)
            for f in schema
            if f.type == manifest_pb2.CONFIG_FIELD_TYPE_SECRET
        )
        return [str(v) for v in values if v]

    # -- the run ------------------------------------------------------------------------------

    def _turn(self, ctx: RunContext, redact: Redactor, *, fresh: bool) -> ServiceTurn:
        upstream = Upstream(
            self.provider,
            timeout=self.timeout(ctx),
            remaining=ctx.remaining,
            redact=redact,
            json_error=self.json_error,
        )
        return ServiceTurn(ctx, upstream, streaming=self.streaming(ctx), fresh=fresh)

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        """One run: the exchange under the deadline guard, retried once without stored ids when the service
        says a stored id is stale and nothing was streamed yet; the service's errors become `run.failed`."""
        redact = Redactor(self.secrets(ctx))
        turn = self._turn(ctx, redact, fresh=False)
        try:
            async with _guard(ctx, self.provider):
                try:
                    await self.exchange(ctx, turn)
                except ServiceError as exc:
                    if not exc.stale_id or not turn.ids.used_stored or turn.answer.streamed:
                        raise
                    log.info("stored external id rejected; retrying fresh", provider=self.provider)
                    turn = self._turn(ctx, redact, fresh=True)
                    turn.metadata["stale_id_retried"] = True
                    await self.exchange(ctx, turn)
            closing = self._closing(turn)
        except _Cancelled as exc:
            yield results.failed(CANCELLED, redact(str(exc)), kind=FailureKind.CANCELLED, usage=turn.usage)
            return
        except ServiceError as exc:
            log.warning("service failed", provider=self.provider, code=exc.code, error=redact(exc.message))
            details = exc.failure_details()
            yield results.failed(
                exc.code,
                redact(exc.message),
                retryable=exc.retryable,
                kind=details.pop("kind"),
                details=details,
                usage=turn.usage,
            )
            return
        except Exception as exc:  # a bug, or a library error no mapping knows: never a secret in it
            log.error("service runner failed", provider=self.provider, error=redact(repr(exc)))
            yield results.failed(
                f"{self.provider}.unexpected_error",
                redact(f"{type(exc).__name__}: {exc}")[:500],
                kind=FailureKind.INTERNAL_ERROR,
                usage=turn.usage,
            )
            return
        for result in closing:
            yield result

    def _closing(self, turn: ServiceTurn) -> list[result_pb2.RunResult]:
        metadata = {"provider": self.provider, **turn.metadata}
        if turn.acknowledged and not turn.answer.has_output:
            metadata["acknowledgement"] = turn.acknowledged
            return [
                *turn.ids.updates(),
                results.completed(finish_reason=FINISH_ACKNOWLEDGED, usage=turn.usage, metadata=metadata),
            ]
        if not turn.answer.has_output:
            raise ServiceError(self.provider, "empty_response", "the service returned no answer")
        return turn.answer.terminal(
            finish_reason=turn.finish_reason,
            usage=turn.usage,
            metadata=metadata,
            before_completed=turn.ids.updates(),
        )


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """A config value by its manifest name, from a dict or a pydantic `config_model` instance (by alias)."""
    if isinstance(config, Mapping):
        return config.get(key, default)
    fields = getattr(type(config), "model_fields", {})
    for name, field in fields.items():
        if key in (field.alias, name):
            return getattr(config, name, default)
    return default


class _Cancelled(Exception):
    """The host cancelled the run while the service was answering."""


@contextlib.asynccontextmanager
async def _guard(ctx: RunContext, provider: str) -> AsyncIterator[None]:
    """Bounds the body by the run's remaining time and ends it at once when the host cancels.

    The scope is set at an absolute loop time (`timeout_at`): `DEADLINE_MARGIN` before the deadline, so
    it fires before the engine's own watchdog and the run ends as `<provider>.timeout`.
    """
    loop = asyncio.get_running_loop()
    left = ctx.remaining()
    when = None if left is None else loop.time() + max(left - DEADLINE_MARGIN, 0.0)
    cancelled = False
    try:
        async with asyncio.timeout_at(when) as scope:

            async def watch() -> None:
                nonlocal cancelled
                await ctx.cancelled.wait()
                cancelled = True
                scope.reschedule(loop.time())

            watcher = asyncio.create_task(watch())
            try:
                yield
            finally:
                watcher.cancel()
    except TimeoutError:
        if cancelled:
            reason = ctx.cancel_reason
            raise _Cancelled(
                f"cancelled by the host: {reason}" if reason else "cancelled by the host"
            ) from None
        raise ServiceError(
            provider, "timeout", "the service did not finish within the run deadline"
        ) from None
