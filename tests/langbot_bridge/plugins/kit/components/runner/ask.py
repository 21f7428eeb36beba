"""Asks for a confirmation (`interaction.requested`); the answer arrives as an `interaction.submitted` run."""

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import (
    INTERACTION_SUBMITTED_EVENT,
    InteractionAction,
    InteractionRequest,
    RunnerContext,
    RunnerResult,
)


class AskRunner(Runner):
    async def run(self, ctx: RunnerContext):
        if ctx.event.event_type == INTERACTION_SUBMITTED_EVENT and ctx.input.interaction:
            answer = ctx.input.interaction
            text = f"answered {answer.interaction_id} with {answer.action_id} {sorted(answer.values.items())}"
            yield RunnerResult.run_completed(ctx.run_id, Message(role="assistant", content=text))
            return
        yield RunnerResult.interaction_requested(
            ctx.run_id,
            InteractionRequest(
                interaction_id="confirm-1",
                kind="confirmation",
                title="Proceed?",
                actions=[
                    InteractionAction(id="yes", label="Yes", style="primary"),
                    InteractionAction(id="no", label="No"),
                ],
                fallback_text="Reply yes or no.",
            ),
        )
        yield RunnerResult.run_completed(ctx.run_id)
