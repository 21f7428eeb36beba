"""The official local agent, `plugin:langbot/local-agent/default`, built only on the host's public API.

One run: pick models (configured primary + fallbacks ∩ authorized, vision-capable when the input has
images) → prompt (`GetPrompt` when granted, else `config.prompt`; never adapter extras) → RAG context as a
text element in front of the input → history pulled with `ListHistory`, cut to `max-round` and fitted to
the token budget by summary compaction (checkpoint in conversation state) → model/tool loop (steering
taken at every turn boundary, tools in parallel or serially, iteration cap, result truncation) → the
answer streamed as `message.delta`s or sent as one `message.completed`, then `run.completed` with the
summed usage. Every failure is a controlled `run.failed` with a `runner.*` code.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import json_format

from agentrunner import RunContext, Runner, results
from agentrunner.errors import AgentRunnerError, RunTokenInvalidError
from agentrunner.v1 import common_pb2, context_pb2, result_pb2
from agentrunner_runners.local_agent import history, rag, tools
from agentrunner_runners.local_agent.config import LocalAgentConfig
from agentrunner_runners.local_agent.messages import (
    ModelMessage,
    estimate,
    estimate_tools,
    has_images,
    input_elements,
    steering_message,
    strip_think,
    user_message,
    without_images,
)
from agentrunner_runners.local_agent.models import ModelPool, NoModel, UsageTotals, failure_kind, granted

T = TypeVar("T")
RunResult = result_pb2.RunResult

#: Context window assumed when neither the config nor the model resource gives one.
DEFAULT_WINDOW = 128_000
CAP_NOTE = (
    "The tool call budget of this turn is used up. Answer the user now with the information you have; "
    "do not ask for more tool calls."
)


class _Cancelled(Exception):
    """The host asked the run to stop (control-stream cancel)."""


class _Stop(Exception):
    """Ends the run with a prepared terminal result."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.run_failed.message)
        self.result = result


@dataclass
class _Turn:
    """One model answer as it was assembled (streamed or whole)."""

    message_id: str = field(default_factory=lambda: results.new_id("msg"))
    text: str = ""
    tool_calls: list[common_pb2.ToolCall] = field(default_factory=list)
    model_id: str = ""
    streamed: bool = False
    emitted: bool = False
    finish_reason: str = ""


@dataclass
class _Past:
    """The conversation so far as the model gets it (`_Agent._history`)."""

    #: the checkpoint's summary of the older turns ('' without one)
    summary: str = ""
    #: the turns after it, verbatim
    messages: list[ModelMessage] = field(default_factory=list)
    #: a `state.updated` result asking the host to keep a new checkpoint (no state API)
    checkpoint: RunResult | None = None


def _failure_details(exc: AgentRunnerError) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": failure_kind(exc)}
    if exc.retry_delay is not None:
        out["retry_delay_ms"] = round(exc.retry_delay * 1000)
    return out


class LocalAgentRunner(Runner):
    """LangBot's local agent as a protocol-v1 runner (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = LocalAgentConfig

    async def run(self, ctx: RunContext) -> AsyncIterator[RunResult]:
        agent = _Agent(ctx, ctx.config)
        async for result in agent.run():
            yield result


class _Agent:
    """State of one run: deadline, usage, model pool, working messages and metadata."""

    def __init__(self, ctx: RunContext, cfg: LocalAgentConfig) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.deadline = time.monotonic() + cfg.timeout
        self.usage = UsageTotals()
        self.meta: dict[str, Any] = {}
        self.pool: ModelPool | None = None
        self._pull_steering = bool(ctx.context.available_apis.steering_pull and ctx.api.available)

    # -- plumbing -----------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self) -> float:
        """Per-call timeout: what is left of the `timeout` budget (the SDK clips it to the run deadline)."""
        left = self.remaining()
        if left <= 0:
            raise _Stop(self._timeout_failure())
        return left

    def _timeout_failure(self) -> RunResult:
        return self._failed("runner.timeout", f"the agent did not finish within {self.cfg.timeout:g} s", True)

    def _check(self) -> None:
        if self.ctx.cancelled.is_set():
            raise _Cancelled()
        if self.remaining() <= 0:
            raise _Stop(self._timeout_failure())

    async def guard(self, awaitable: Awaitable[T]) -> T:
        """Awaits a host call, abandoning it at once on cancel or when the `timeout` budget runs out."""
        self._check()
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.ctx.cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stop}, timeout=max(self.remaining(), 0.0), return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                return task.result()
            self._check()
            raise _Stop(self._timeout_failure())
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def _failed(self, code: str, message: str, retryable: bool = False, **details: Any) -> RunResult:
        return results.failed(
            code,
            message,
            retryable=retryable,
            details=details or None,
            usage=self.usage.to_pb(),
            metadata=self._metadata(),
        )

    def _metadata(self) -> dict[str, Any]:
        meta = dict(self.meta)
        if self.pool is not None and self.pool.failures:
            meta["model_failures"] = [f.as_dict() for f in self.pool.failures]
        meta["model_calls"] = self.usage.calls
        return json_format.MessageToDict(results.to_struct(meta))

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[RunResult]:
        try:
            async for result in self._run():
                yield result
        except _Cancelled:
            reason = self.ctx.cancel_reason or "cancelled by the host"
            yield self._failed("cancelled", f"cancelled: {reason}")
        except _Stop as stop:
            yield stop.result
        except NoModel as exc:
            retryable = any(f.retryable for f in exc.failures)
            yield self._failed(exc.code, exc.message, retryable, **exc.summary())

    async def _run(self) -> AsyncIterator[RunResult]:
        ctx, cfg = self.ctx, self.cfg
        self._check()
        elements = input_elements(ctx.input.raw)
        if not elements:
            raise _Stop(self._failed("runner.empty_input", "the event carries no input to answer"))
        self.pool = ModelPool.select(ctx.resources, cfg.models, needs_vision=has_images(elements))
        self.meta["multimodal"] = has_images(elements)

        prompt = await self._prompt()
        tool_defs: list[common_pb2.ToolDefinition] = []
        if ctx.resources.tools:
            tool_defs, warnings = await self.guard(tools.definitions(ctx, self.timeout))
            if warnings:
                self.meta["tool_detail_errors"] = warnings
        self.meta["tools_offered"] = [t.name for t in tool_defs]

        retrieval = await self.guard(rag.retrieve(ctx, cfg, ctx.input.to_text(), self.timeout))
        if retrieval.info:
            self.meta["rag"] = dict(retrieval.info, used=len(retrieval.chunks))
        user = user_message(elements, prefix=retrieval.context_text())

        past = await self._history(prompt, user, tool_defs)
        if past.checkpoint is not None:
            yield past.checkpoint

        messages: list[ModelMessage] = list(prompt)
        if past.summary:
            messages.append(history.summary_message(past.summary))
        messages.extend(past.messages)
        messages.append(user)

        async for r in self._loop(messages, tool_defs):
            yield r

    # -- prompt -------------------------------------------------------------------------------

    async def _prompt(self) -> list[ModelMessage]:
        """`GetPrompt` when the run may call it and it answers with messages, else `config.prompt`."""
        ctx = self.ctx
        if ctx.context.available_apis.prompt_get and ctx.api.available:
            try:
                resp = await self.guard(ctx.api.get_prompt(timeout=self.timeout()))
                if resp.messages:
                    self.meta["prompt_source"] = "host"
                    return list(resp.messages)
            except AgentRunnerError as exc:
                self.meta["prompt_error"] = exc.reason
        self.meta["prompt_source"] = "config"
        return [ModelMessage(role=p.role, content=p.content) for p in self.cfg.prompt if p.content]

    # -- history ------------------------------------------------------------------------------

    async def _history(
        self, prompt: list[ModelMessage], user: ModelMessage, tool_defs: list[common_pb2.ToolDefinition]
    ) -> _Past:
        """The conversation so far as the model gets it: the checkpoint's summary and the entries after
        it, compacted when they would not fit the token budget (the older entries summarized into a new
        checkpoint, `_summarized`; the oldest of the rest dropped). What happened is recorded
        in `meta["history"]`."""
        info: dict[str, Any] = {}
        self.meta["history"] = info
        fetched = await self._fetch_history(info)
        if fetched is None:
            return _Past()
        checkpoint, entries = fetched
        summary = checkpoint.summary if checkpoint else ""
        assert self.pool is not None
        cfg = self.cfg
        window = cfg.context_window_tokens or self.pool.primary.context_window_tokens or DEFAULT_WINDOW
        limit = int(max(window - cfg.reserve_output_tokens, 256) * cfg.compaction_threshold)
        fixed = [*prompt, *([history.summary_message(summary)] if summary else []), user]
        everything = fixed + [e.message for e in entries]
        total, scale = await self._context_tokens(everything, tool_defs, bool(entries), info)
        info.update(budget_tokens=limit, context_tokens=total)
        if total <= limit:
            info["kept"] = len(entries)
            return _Past(summary, [e.message for e in entries])
        fixed_tokens = int((estimate(fixed) + estimate_tools(tool_defs)) * scale)
        history_budget = max(limit - fixed_tokens - cfg.summary_max_tokens, 0)
        older, kept = history.split_for_compaction(entries, history_budget // 2, scale)
        past = await self._summarized(_Past(summary), checkpoint, older, window, info)
        # still too large (huge recent turns): drop the oldest verbatim entries
        budget_left = limit - int(
            (estimate([*prompt, history.summary_message(past.summary), user]) + estimate_tools(tool_defs))
            * scale
        )
        while kept and int(sum(e.tokens for e in kept) * scale) > budget_left:
            kept.pop(0)
            info["dropped"] = info.get("dropped", 0) + 1
        past.messages = [e.message for e in kept]
        info["kept"] = len(kept)
        return past

    async def _fetch_history(
        self, info: dict[str, Any]
    ) -> tuple[history.Checkpoint | None, list[history.Entry]] | None:
        """The conversation's checkpoint (if any) and the history entries after it, through the history
        API; None when the run may not page history or the fetch failed."""
        ctx, cfg = self.ctx, self.cfg
        if not (ctx.context.available_apis.history_page and ctx.api.available):
            info["source"] = "unavailable"
            return None
        checkpoint: history.Checkpoint | None = None
        try:
            checkpoint = await self.guard(history.read_checkpoint(ctx, self.timeout))
        except AgentRunnerError as exc:
            info["checkpoint_error"] = exc.reason
        try:
            entries, page_info = await history.fetch(
                ctx,
                max_round=cfg.max_round,
                page_size=cfg.history_fetch_limit,
                after_seq=checkpoint.through_seq if checkpoint else 0,
                budget=self.timeout,
                cancelled=self.guard,
            )
        except AgentRunnerError as exc:
            info["error"] = exc.reason
            return None
        info.update(page_info, source="history_api")
        return checkpoint, entries

    async def _context_tokens(
        self,
        everything: list[ModelMessage],
        tool_defs: list[common_pb2.ToolDefinition],
        has_entries: bool,
        info: dict[str, Any],
    ) -> tuple[int, float]:
        """The tokens of the whole context and the factor from the estimate to them: the host's count
        when the primary model may count and there is history (`CountTokens`), else the estimate."""
        estimated = estimate(everything) + estimate_tools(tool_defs)
        assert self.pool is not None
        primary = self.pool.primary
        if not (granted(primary, "count_tokens") and has_entries):
            return estimated, 1.0
        try:
            counted = await self.guard(
                self.ctx.api.count_tokens(
                    primary.model_id, everything, tools=tool_defs, timeout=self.timeout()
                )
            )
        except AgentRunnerError as exc:
            info["token_count_error"] = exc.reason
            return estimated, 1.0
        total = int(counted.tokens)
        info["token_count"] = "exact" if counted.exact else (counted.method or "host_estimate")
        return total, total / estimated if estimated else 1.0

    async def _summarized(
        self,
        past: _Past,
        checkpoint: history.Checkpoint | None,
        older: list[history.Entry],
        window: int,
        info: dict[str, Any],
    ) -> _Past:
        """`past` with the `older` entries summarized into a new checkpoint (kept through the state API, else
        handed to the host as `state.updated`); without a summary they are dropped."""
        if not older:
            return past
        summarized = await self._summarize(past.summary, older, window)
        if summarized is None:
            info["dropped"] = len(older)
            return past
        summary, model_id = summarized
        value = history.Checkpoint.build(
            summary, older[-1], model_id=model_id, items=len(older), previous=checkpoint
        )
        saved = await self._save_checkpoint(value)
        info["compacted"] = len(older)
        return _Past(summary, past.messages, saved)

    async def _summarize(
        self, previous: str, older: list[history.Entry], window: int
    ) -> tuple[str, str] | None:
        """A summary of `previous` + `older` from the first live model, with that model's id; None when
        every attempt fails."""
        assert self.pool is not None
        source = history.transcript_text(previous, older)
        max_chars = max(window - self.cfg.summary_max_tokens, 500) * 4
        if len(source) > max_chars:  # keep the newest part of an oversized transcript
            source = "…" + source[-max_chars:]
        messages = [
            ModelMessage(role="system", content=history.SUMMARY_INSTRUCTION),
            ModelMessage(role="user", content=source),
        ]
        for model in self.pool.alive():
            if not granted(model, "invoke"):
                continue
            try:
                resp = await self.guard(
                    self.ctx.api.invoke_model(
                        model.model_id,
                        messages,
                        extra_args={"max_tokens": self.cfg.summary_max_tokens},
                        remove_think=True,
                        timeout=self.timeout(),
                    )
                )
            except AgentRunnerError as exc:
                self.meta.setdefault("history", {})["compaction_error"] = f"{model.model_id}: {exc.reason}"
                continue
            if resp.HasField("usage"):
                self.usage.add(resp.usage)
            text = strip_think(resp.message.content).strip()
            if text:
                return text, model.model_id
        return None

    async def _save_checkpoint(self, value: dict[str, Any]) -> RunResult | None:
        """Writes the checkpoint now through the state API (None), else the `state.updated` result that
        asks the host to keep it."""
        if self.ctx.context.available_apis.state and self.ctx.api.available:
            try:
                await self.guard(
                    self.ctx.api.set_state(
                        "conversation", history.CHECKPOINT_KEY, value, timeout=self.timeout()
                    )
                )
                self.meta["history"]["checkpoint"] = "state_api"
                return None
            except AgentRunnerError as exc:
                self.meta["history"]["checkpoint_error"] = exc.reason
        self.meta["history"]["checkpoint"] = "state_updated"
        return results.state("conversation", history.CHECKPOINT_KEY, value)

    # -- steering -----------------------------------------------------------------------------

    async def _steering(self) -> list[ModelMessage]:
        """Steering input that arrived since the last turn boundary, as user messages."""
        items = self.ctx.steering.pending()
        # Pushed items arrive on the control stream; the host also queues for PullSteering (each item is
        # delivered once either way), so pull too: a control stream may be absent or still connecting.
        if self._pull_steering:
            try:
                resp = await self.guard(self.ctx.api.pull_steering(limit=0, timeout=min(self.timeout(), 5.0)))
                items.extend(resp.items)
            except AgentRunnerError as exc:
                self._pull_steering = False
                self.meta["steering_error"] = exc.reason
        out = [m for m in (steering_message(i) for i in items) if m is not None]
        if out:
            self.meta["steering"] = self.meta.get("steering", 0) + len(out)
        return out

    # -- the model / tool loop ----------------------------------------------------------------

    async def _loop(
        self, messages: list[ModelMessage], tool_defs: list[common_pb2.ToolDefinition]
    ) -> AsyncIterator[RunResult]:
        cfg = self.cfg
        allowed = {t.name for t in tool_defs}
        iterations = 0
        capped = False
        while True:
            self._check()
            messages.extend(await self._steering())
            offer = tool_defs if iterations < cfg.max_tool_iterations else []
            if tool_defs and not offer and not capped:
                capped = True
                self.meta["tool_iterations_capped"] = True
                messages.append(ModelMessage(role="system", content=CAP_NOTE))
            turn = _Turn()
            async for r in self._model_turn(messages, offer, turn):
                yield r
            if turn.tool_calls and offer:
                iterations += 1
                self.meta["tool_iterations"] = iterations
                assistant = ModelMessage(role="assistant", content=turn.text, tool_calls=turn.tool_calls)
                messages.append(assistant)
                async for r in self._run_tools(turn.tool_calls, allowed, messages):
                    yield r
                continue
            text = turn.text.strip()
            if not text:
                raise _Stop(
                    self._failed(
                        "runner.empty_output",
                        f"model {turn.model_id} returned no answer",
                        True,
                        model=turn.model_id,
                        finish_reason=turn.finish_reason,
                    )
                )
            more = await self._steering()
            if more:  # input arrived while answering: deliver this answer, then answer the new input
                yield results.message(turn.text, message_id=turn.message_id)
                messages.append(ModelMessage(role="assistant", content=turn.text))
                messages.extend(more)
                self.meta.setdefault("steering_turns", 0)
                self.meta["steering_turns"] += 1
                continue
            self.meta["model"] = turn.model_id
            if turn.streamed:
                yield results.completed(
                    turn.text,
                    message_id=turn.message_id,
                    finish_reason=turn.finish_reason or "stop",
                    usage=self.usage.to_pb(),
                    metadata=self._metadata(),
                )
            else:
                yield results.message(turn.text, message_id=turn.message_id)
                yield results.completed(
                    finish_reason=turn.finish_reason or "stop",
                    usage=self.usage.to_pb(),
                    metadata=self._metadata(),
                )
            return

    def _for_model(
        self, messages: list[ModelMessage], model: context_pb2.ModelResource
    ) -> list[ModelMessage]:
        return messages if model.vision else [without_images(m) for m in messages]

    async def _model_turn(
        self, messages: list[ModelMessage], offer: list[common_pb2.ToolDefinition], turn: _Turn
    ) -> AsyncIterator[RunResult]:
        """One model answer with fallback: a failing model is dropped and the next one answers."""
        assert self.pool is not None
        streaming = self.ctx.delivery.supports_streaming
        for model in self.pool.alive():
            msgs = self._for_model(messages, model)
            use_stream = granted(model, "stream") and (streaming or not granted(model, "invoke"))
            try:
                if use_stream:
                    async for r in self._stream(model, msgs, offer, turn, deliver=streaming):
                        yield r
                else:
                    await self._invoke(model, msgs, offer, turn)
                    if streaming and turn.text and not turn.tool_calls:
                        turn.streamed = turn.emitted = True
                        yield results.delta(turn.text, cumulative_text=turn.text, message_id=turn.message_id)
                turn.model_id = model.model_id
                return
            except RunTokenInvalidError as exc:
                raise _Stop(self._failed("runner.host_error", exc.message)) from None
            except AgentRunnerError as exc:
                if self.remaining() <= 0:
                    raise _Stop(self._timeout_failure()) from None
                if turn.emitted:  # the user already saw part of this answer: no silent switch
                    raise _Stop(
                        self._failed(
                            "runner.model_error",
                            f"model {model.model_id} failed mid-answer: {exc.spec_code}: {exc.message}",
                            exc.retryable,
                            model=model.model_id,
                            **_failure_details(exc),
                        )
                    ) from None
                self.ctx.log.warning("model failed, trying the next", model=model.model_id, reason=exc.reason)
                self.pool.fail(model.model_id, exc)
                turn.text, turn.tool_calls = "", []
        raise self.pool.exhausted()

    async def _invoke(
        self,
        model: context_pb2.ModelResource,
        msgs: list[ModelMessage],
        offer: list[common_pb2.ToolDefinition],
        turn: _Turn,
    ) -> None:
        resp = await self.guard(
            self.ctx.api.invoke_model(
                model.model_id, msgs, tools=offer, remove_think=self.cfg.remove_think, timeout=self.timeout()
            )
        )
        if resp.HasField("usage"):
            self.usage.add(resp.usage)
        text = resp.message.content
        if not text and resp.message.contents:
            text = "\n".join(c.text for c in resp.message.contents if c.WhichOneof("kind") == "text")
        turn.text = strip_think(text) if self.cfg.remove_think else text
        turn.tool_calls = list(resp.message.tool_calls)
        turn.finish_reason = resp.finish_reason

    async def _stream(
        self,
        model: context_pb2.ModelResource,
        msgs: list[ModelMessage],
        offer: list[common_pb2.ToolDefinition],
        turn: _Turn,
        *,
        deliver: bool,
    ) -> AsyncIterator[RunResult]:
        """Streams one answer: each non-empty increment becomes a `message.delta` (when `deliver`)."""
        stream = self.ctx.api.stream_model(
            model.model_id, msgs, tools=offer, remove_think=self.cfg.remove_think, timeout=self.timeout()
        )
        calls: dict[str, common_pb2.ToolCall] = {}
        try:
            while True:
                try:
                    item = await self.guard(anext(stream))
                except StopAsyncIteration:
                    break
                kind = item.WhichOneof("item")
                if kind == "usage":
                    self.usage.add(item.usage)
                    continue
                if kind != "chunk":
                    continue
                chunk = item.chunk
                for call in chunk.tool_calls:
                    calls[call.id or f"idx{len(calls)}"] = call
                if chunk.finish_reason:
                    turn.finish_reason = chunk.finish_reason
                if chunk.content:
                    turn.text += chunk.content
                    if deliver:
                        turn.streamed = turn.emitted = True
                        yield results.delta(
                            chunk.content, cumulative_text=turn.text, message_id=turn.message_id
                        )
        finally:
            with contextlib.suppress(BaseException):
                await stream.aclose()
        turn.tool_calls = list(calls.values())

    async def _run_tools(
        self, calls: list[common_pb2.ToolCall], allowed: set[str], messages: list[ModelMessage]
    ) -> AsyncIterator[RunResult]:
        """Executes one round of tool calls (parallel or serial) and appends their results in call order."""
        cfg = self.cfg
        prepared = []
        for call in calls:
            fixed = common_pb2.ToolCall()
            fixed.CopyFrom(call)
            if not fixed.id:
                fixed.id = results.new_id("call")
            prepared.append(fixed)
        # the assistant message must carry the ids the tool messages answer
        del messages[-1].tool_calls[:]
        messages[-1].tool_calls.extend(prepared)

        def params(call: common_pb2.ToolCall) -> dict[str, Any]:
            try:
                return tools.parse_arguments(call.arguments_json)
            except ValueError:
                return {}

        def run_one(call: common_pb2.ToolCall) -> Awaitable[tools.ToolOutcome]:
            return tools.execute(
                self.ctx, call, allowed=allowed, max_chars=cfg.max_tool_result_chars, budget=self.timeout
            )

        def completed(o: tools.ToolOutcome) -> RunResult:
            return results.tool_completed(
                o.call.id, o.call.name, o.preview, error_code=o.error_code, error_message=o.error_message
            )

        outcomes: dict[str, tools.ToolOutcome] = {}
        if cfg.tool_execution_mode == "serial" or len(prepared) == 1:
            for call in prepared:
                self._check()
                yield results.tool_started(call.id, call.name, params(call))
                outcome = await self.guard(run_one(call))
                outcomes[call.id] = outcome
                yield completed(outcome)
        else:
            for call in prepared:
                yield results.tool_started(call.id, call.name, params(call))
            tasks = [asyncio.ensure_future(run_one(call)) for call in prepared]
            try:
                for next_done in asyncio.as_completed(tasks):
                    outcome = await self.guard(next_done)
                    outcomes[outcome.call.id] = outcome
                    yield completed(outcome)
            finally:
                for task in tasks:
                    task.cancel()
        messages.extend(outcomes[c.id].message() for c in prepared)
