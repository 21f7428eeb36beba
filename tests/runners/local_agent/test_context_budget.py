"""History fitting: token budget (CountTokens or estimate), summary compaction and its checkpoint in
conversation state, and reuse of the checkpoint on the next turn."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner_runners.local_agent import LocalAgentRunner
from agentrunner_runners.local_agent.history import CHECKPOINT_KEY, CHECKPOINT_SCHEMA, SUMMARY_INSTRUCTION
from tests.runners.local_agent.conftest import answer, context, item, model, texts

pytestmark = pytest.mark.asyncio
R = LocalAgentRunner
BUDGET = {
    "context-window-tokens": 1000,
    "reserve-output-tokens": 0,
    "compaction-threshold": 1.0,
    "summary-max-tokens": 50,
}


def _long_history(rounds: int = 6) -> dict[str, Any]:
    items = []
    for r in range(rounds):
        items.append(item(2 * r + 1, "user", f"Q{r} " + "q" * 396))
        items.append(item(2 * r + 2, "assistant", f"A{r} " + "a" * 396))
    return {"items": items}


def _count(req, call) -> dict[str, Any]:
    """A tokenizer stand-in: ~4 characters per token, like the runner's estimate."""
    return {"tokens": sum(len(texts(m)) // 4 + 4 for m in req.messages), "exact": True, "method": "test"}


def _invoke(req, call) -> dict[str, Any]:
    if req.messages and req.messages[0].content == SUMMARY_INSTRUCTION:
        return answer("SUMMARY: user asked Q0..Q3", usage=(100, 10))
    return answer("final", usage=(50, 5))


async def test_over_budget_history_is_compacted_with_a_checkpoint(host: HostDouble) -> None:
    host.on("ListHistory", _long_history())
    host.on("CountTokens", _count)
    host.on("InvokeModel", _invoke)
    out = await host.run(R, context=context("next?", config=BUDGET))
    assert out.text == "final"

    summary_call, main_call = (c.request for c in host.calls_to("InvokeModel"))
    assert summary_call.messages[0].content == SUMMARY_INSTRUCTION
    summarized = summary_call.messages[1].content
    assert "Q0 " in summarized and "A0 " in summarized
    assert json_format.MessageToDict(summary_call.extra_args) == {"max_tokens": 50}

    sent = [texts(m) for m in main_call.messages]
    assert "SUMMARY: user asked Q0..Q3" in sent[1]
    assert not any(s.startswith("Q0 ") for s in sent)
    assert sent[-3].startswith("Q5 ") and sent[-2].startswith("A5 ") and sent[-1] == "next?"
    kept_questions = [s for s in sent if s.startswith("Q")]
    assert all(k.split()[0] not in summarized for k in kept_questions)  # nothing both summarized and kept

    state = host.calls_to("SetState")[0].request
    assert state.key == CHECKPOINT_KEY
    value = json_format.MessageToDict(state.value)
    assert value["schema"] == CHECKPOINT_SCHEMA and value["summary"] == "SUMMARY: user asked Q0..Q3"
    last_summarized = max(int(s.split()[1][1:]) for s in summarized.splitlines() if s.startswith("user: Q"))
    assert value["through_seq"] in (2 * last_summarized + 1, 2 * last_summarized + 2)
    assert host.calls_to("CountTokens")[0].request.model_id == "m1"
    assert out.metadata["history"]["compacted"] > 0
    assert out.terminal.usage.total_tokens == 165  # summary call + answer


async def test_next_turn_reuses_the_checkpoint_and_skips_summarized_items(host: HostDouble) -> None:
    checkpoint = {"schema": CHECKPOINT_SCHEMA, "summary": "OLD-SUMMARY-XYZ", "through_seq": 8}
    host.on("ListHistory", _long_history())
    host.on("CountTokens", _count)
    host.on("InvokeModel", _invoke)
    out = await host.run(
        R, context=context("next?", config=BUDGET, state={"conversation": {CHECKPOINT_KEY: checkpoint}})
    )
    assert out.text == "final"
    calls = host.calls_to("InvokeModel")
    assert len(calls) == 1 and not host.calls_to("SetState")  # fits now: no new compaction
    sent = [texts(m) for m in calls[0].request.messages]
    assert "OLD-SUMMARY-XYZ" in sent[1]
    assert [s.split()[0] for s in sent[2:-1]] == ["Q4", "A4", "Q5", "A5"]
    assert out.metadata["history"]["reached_checkpoint"] is True


async def test_exact_token_count_triggers_compaction_the_estimate_would_miss(host: HostDouble) -> None:
    host.on("ListHistory", _long_history(2))
    host.on("CountTokens", {"tokens": 100_000, "exact": True})
    host.on("InvokeModel", _invoke)
    out = await host.run(R, context=context("next?", config={"context-window-tokens": 8000}))
    assert out.completed
    assert host.calls_to("InvokeModel")[0].request.messages[0].content == SUMMARY_INSTRUCTION

    # without count_tokens granted, the estimate decides (and it fits): no CountTokens, no summary
    host.calls.clear()
    out = await host.run(
        R,
        context=context(
            "next?", models=[model("m1", ops=("invoke", "stream"))], config={"context-window-tokens": 8000}
        ),
    )
    assert out.completed and not host.calls_to("CountTokens")
    assert len(host.calls_to("InvokeModel")) == 1


async def test_checkpoint_goes_through_state_updated_without_the_state_api(host: HostDouble) -> None:
    host.on("ListHistory", _long_history())
    host.on("CountTokens", _count)
    host.on("InvokeModel", _invoke)
    out = await host.run(R, context=context("next?", config=BUDGET, apis={"state": False}))
    assert out.completed and not host.calls_to("SetState") and not host.calls_to("GetState")
    update = out.of_type("state.updated")[0].state_updated
    assert update.key == CHECKPOINT_KEY
    assert json_format.MessageToDict(update.value)["summary"] == "SUMMARY: user asked Q0..Q3"


async def test_failed_summary_falls_back_to_dropping_old_turns(host: HostDouble) -> None:
    host.on("ListHistory", _long_history())
    host.on("CountTokens", _count)

    def invoke(req, call):
        if req.messages[0].content == SUMMARY_INSTRUCTION:
            return answer("")  # nothing useful
        return answer("final")

    host.on("InvokeModel", invoke)
    out = await host.run(R, context=context("next?", config=BUDGET))
    assert out.text == "final" and not host.calls_to("SetState")
    main = host.calls_to("InvokeModel")[-1].request
    assert main.messages[1].role == "user" and not main.messages[1].content.startswith("Q0 ")
    assert out.metadata["history"]["dropped"] > 0
