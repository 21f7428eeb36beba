"""Asking the user a question in the middle of a harness turn, through the host's structured interactions.

A harness that stops to ask (Codex's approval requests) cannot end the run and wait for the answer's
new run: its process holds the turn. So the runner emits `interaction.requested` and keeps the turn
open; the host routes the answer (`SubmitInteraction` → an `interaction.submitted` event for the
conversation) into the open run as steering input carrying `RunInput.interaction` (the run's agent
must accept steering), and `wait_for_answer` picks it out. Other steering input that arrives meanwhile
is put back for the steering follow-ups. No answer before the timeout (or a surface that cannot show
the question) is None: the caller decides the safe default.

    approved = await confirm(ctx, "Codex asks to run a command", description="`rm -rf build`", timeout=300)
"""

# ruff: noqa: ASYNC109 - a per-call `timeout` bounds one request / one question, not the caller's scope.
from __future__ import annotations

import asyncio
import time
import weakref

from agentrunner.context import RunContext
from agentrunner.v1 import common_pb2, proxy_service_pb2

CONFIRM = "confirm"

_LOCKS: weakref.WeakKeyDictionary[RunContext, asyncio.Lock] = weakref.WeakKeyDictionary()


async def wait_for_answer(
    ctx: RunContext, interaction_id: str, timeout: float
) -> common_pb2.InteractionSubmission | None:
    """The answer to `interaction_id` from the run's steering input, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    others: list[proxy_service_pb2.SteeringInput] = []
    try:
        while (left := deadline - time.monotonic()) > 0:
            item = await ctx.steering.get(timeout=left)
            if item is None:
                return None
            if item.input.HasField("interaction") and item.input.interaction.interaction_id == interaction_id:
                return item.input.interaction
            others.append(item)
        return None
    finally:
        for item in others:
            ctx.steering.push(item)


async def confirm(
    ctx: RunContext,
    title: str,
    *,
    description: str = "",
    timeout: float,
    confirm_label: str = "Approve",
    cancel_label: str = "Decline",
) -> bool | None:
    """Asks a yes/no question and waits for the answer: True / False, None when nobody answered.

    Questions of one run are asked one at a time (the answer of one never reads as another's).
    """
    lock = _LOCKS.setdefault(ctx, asyncio.Lock())
    async with lock:
        request = await ctx.request_confirmation(
            title,
            description=description[:4000],
            confirm_label=confirm_label,
            cancel_label=cancel_label,
            danger=True,
            expires_in=timeout,
            fallback_text=f"{title}\n\n{description[:4000]}\n\nAnswer: {confirm_label} / {cancel_label}",
        )
        answer = await wait_for_answer(ctx, request.interaction_id, timeout)
    if answer is None:
        return None
    return answer.action_id == CONFIRM
