"""The agent's prompt and the conversation's steering queue: what a run reads about its inputs."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence

from agentrunner.errors import InvalidArgumentError
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.paging import FactArea
from agentrunner_host.store.fact_stores import FactStores

pb = proxy_service_pb2

#: agent id -> the agent's prompt messages (sync or async); wired by the host to its agent config
PromptLookup = Callable[
    [str], Sequence[common_pb2.ModelMessage] | Awaitable[Sequence[common_pb2.ModelMessage]]
]


class AgentInputs(FactArea):
    """GetPrompt, PullSteering."""

    def __init__(self, stores: FactStores, prompt_lookup: PromptLookup | None = None) -> None:
        super().__init__(stores)
        self.prompt_lookup = prompt_lookup

    def table(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {
            "GetPrompt": self.get_prompt,
            "PullSteering": self.pull_steering,
        }

    async def get_prompt(self, call: ProxyCall, request: pb.GetPromptRequest) -> pb.GetPromptResponse:
        call.require(call.snapshot.prompt, "prompt get", f"prompt:{call.snapshot.agent_id}")
        if self.prompt_lookup is None:
            return pb.GetPromptResponse()
        messages = self.prompt_lookup(call.snapshot.agent_id)
        if inspect.isawaitable(messages):
            messages = await messages
        return pb.GetPromptResponse(messages=list(messages))

    async def pull_steering(
        self, call: ProxyCall, request: pb.PullSteeringRequest
    ) -> pb.PullSteeringResponse:
        snap = call.snapshot
        call.require(snap.steering, "steering pull", f"steering:{snap.conversation_id}")
        if request.limit < 0:
            raise InvalidArgumentError("limit must not be negative", field="limit")
        if not snap.conversation_id:
            return pb.PullSteeringResponse()
        items = await self.stores.steering.claim(
            run_id=snap.run_id,
            conversation_id=snap.conversation_id,
            limit=request.limit,
            max_bytes=self.settings.page_max_bytes,
        )
        return pb.PullSteeringResponse(items=items, max_page_bytes=self.settings.page_max_bytes)
