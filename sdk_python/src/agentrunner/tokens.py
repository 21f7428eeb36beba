"""The one token estimate the host (`CountTokens`) and the runners (history budgets) share.

No tokenizer ships offline with its vocabulary (tiktoken downloads its BPE tables at first use), so this
is a documented character estimate, `METHOD`: per text, ceil(non-CJK characters / 4) plus one token per
CJK character; per message `MESSAGE_TOKENS` plus its role, name, text parts and tool calls; per image
`IMAGE_TOKENS` (OpenAI's low-detail cost); per tool the JSON of its OpenAI-style definition; plus
`REPLY_TOKENS` once for the reply primer. Providers count differently; treat it as an estimate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format

from agentrunner.v1 import common_pb2

METHOD = "estimate:chars-v1"
MESSAGE_TOKENS = 4
IMAGE_TOKENS = 85
REPLY_TOKENS = 3

# CJK radicals .. unified ideographs (with kana), Hangul syllables, compatibility ideographs
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def text_tokens(text: str) -> int:
    """Tokens of one text: a CJK character is one token, other characters four to a token."""
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


def message_tokens(message: common_pb2.ModelMessage) -> int:
    """Tokens of one message: overhead, role, name, content, text and image parts, tool calls."""
    total = MESSAGE_TOKENS + text_tokens(message.role) + text_tokens(message.content)
    total += text_tokens(message.name)
    for element in message.contents:
        kind = element.WhichOneof("kind")
        if kind == "text":
            total += text_tokens(element.text)
        elif kind == "image":
            total += IMAGE_TOKENS
    for call in message.tool_calls:
        total += text_tokens(call.name) + text_tokens(call.arguments_json)
    return total


def tool_json(tool: common_pb2.ToolDefinition) -> dict[str, Any]:
    """The OpenAI-style definition of a tool, as sent to chat models (and counted here)."""
    parameters = json_format.MessageToDict(tool.parameters) if tool.parameters.fields else {}
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters or {"type": "object", "properties": {}},
        },
    }


def tool_tokens(tools: Iterable[common_pb2.ToolDefinition]) -> int:
    """Estimated tokens of tool definitions, counted on their compact OpenAI-style JSON."""
    return sum(text_tokens(json.dumps(tool_json(t), separators=(",", ":"))) for t in tools)


def estimate(
    messages: Iterable[common_pb2.ModelMessage], tools: Iterable[common_pb2.ToolDefinition] = ()
) -> int:
    """Tokens of a whole request: every message, every tool and the reply primer."""
    return REPLY_TOKENS + sum(message_tokens(m) for m in messages) + tool_tokens(tools)
