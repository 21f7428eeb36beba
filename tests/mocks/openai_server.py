"""The OpenAI-compatible mock, re-exported from `agentrunner_host.testing.openai_mock` (the demo needs it
importable). Run standalone with `python -m tests.mocks.openai_server --port 0`; it prints
`MOCK_OPENAI_LISTENING <port>` once it accepts connections."""

from __future__ import annotations

from agentrunner_host.testing.openai_mock import (
    EMBED_DIM,
    MockOpenAIServer,
    MockState,
    build_app,
    hashed_embedding,
    main,
    words,
)
from agentrunner_host.testing.openai_stream import StreamRecord

__all__ = [
    "EMBED_DIM",
    "MockOpenAIServer",
    "MockState",
    "StreamRecord",
    "build_app",
    "hashed_embedding",
    "main",
    "words",
]

if __name__ == "__main__":
    main()
