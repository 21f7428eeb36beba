"""Turning the run's input, transcript items and steering into `ModelMessage`s, and token estimates.

The input keeps every content element (images, files, artifact refs): RAG and notes only add text
elements, they never replace the multimodal parts (OFFICIAL_RUNNER_PLUGINS §5).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agentrunner import tokens
from agentrunner.v1 import common_pb2, context_pb2, proxy_service_pb2

ModelMessage = common_pb2.ModelMessage
ContentElement = common_pb2.ContentElement

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)


def text_element(text: str) -> ContentElement:
    return ContentElement(text=text)


def has_images(elements: Iterable[ContentElement]) -> bool:
    return any(e.WhichOneof("kind") == "image" for e in elements)


def message_has_images(message: ModelMessage) -> bool:
    return has_images(message.contents)


def _attachment_element(ref: common_pb2.ArtifactRef) -> ContentElement:
    """Image attachments become image elements the host resolves (`artifact://id`); others stay refs."""
    if ref.mime_type.startswith("image/") and (ref.artifact_id or ref.uri):
        uri = ref.uri if ref.uri.startswith(("http://", "https://", "data:")) else ""
        uri = uri or f"artifact://{ref.artifact_id}"
        return ContentElement(image=common_pb2.ImageContent(uri=uri, mime_type=ref.mime_type))
    return ContentElement(artifact=ref)


def _describe(element: ContentElement) -> str | None:
    kind = element.WhichOneof("kind")
    if kind == "file":
        f = element.file
        return f"[attached file: {f.name or f.uri} ({f.mime_type or 'unknown type'})]"
    if kind == "artifact":
        a = element.artifact
        label = a.name or a.artifact_id
        return f"[attached file: {label} ({a.mime_type or 'unknown type'}, {a.size_bytes} bytes)]"
    return None


def input_elements(run_input: context_pb2.RunInput) -> list[ContentElement]:
    """Every element of the input, in order: text (when not already in contents), contents, attachments."""
    elements = list(run_input.contents)
    if run_input.text and not any(e.WhichOneof("kind") == "text" for e in elements):
        elements.insert(0, text_element(run_input.text))
    elements.extend(_attachment_element(a) for a in run_input.attachments)
    return elements


def user_message(elements: Sequence[ContentElement], *, prefix: str = "") -> ModelMessage:
    """A user message that keeps all elements; files get a short text note so the model knows of them."""
    out: list[ContentElement] = []
    if prefix:
        out.append(text_element(prefix))
    for element in elements:
        out.append(element)
        note = _describe(element)
        if note:
            out.append(text_element(note))
    plain = all(e.WhichOneof("kind") == "text" for e in out)
    if plain:
        return ModelMessage(role="user", content="\n\n".join(e.text for e in out if e.text))
    return ModelMessage(role="user", content=elements_text(out), contents=out)


def elements_text(elements: Iterable[ContentElement]) -> str:
    return "\n\n".join(e.text for e in elements if e.WhichOneof("kind") == "text" and e.text)


def message_text(message: ModelMessage) -> str:
    return elements_text(message.contents) if message.contents else message.content


def transcript_message(item: proxy_service_pb2.TranscriptItem) -> ModelMessage | None:
    """A transcript item as a model message (None for non-message items and empty ones)."""
    if item.role not in ("user", "assistant") or (item.item_type and item.item_type != "message"):
        return None
    elements = list(item.contents)
    elements.extend(_attachment_element(a) for a in item.artifacts)
    if elements:
        if item.content and not any(e.WhichOneof("kind") == "text" for e in elements):
            elements.insert(0, text_element(item.content))
        if all(e.WhichOneof("kind") == "text" for e in elements):
            return ModelMessage(role=item.role, content=elements_text(elements))
        return ModelMessage(role=item.role, content=elements_text(elements), contents=elements)
    if not item.content:
        return None
    return ModelMessage(role=item.role, content=item.content)


def steering_message(item: proxy_service_pb2.SteeringInput) -> ModelMessage | None:
    elements = input_elements(item.input)
    if not elements:
        return None
    return user_message(elements)


def without_images(message: ModelMessage) -> ModelMessage:
    """The message for a model without vision: images replaced by a text placeholder."""
    if not message_has_images(message):
        return message
    out = ModelMessage()
    out.CopyFrom(message)
    del out.contents[:]
    for element in message.contents:
        if element.WhichOneof("kind") == "image":
            out.contents.append(text_element("[image omitted: this model cannot see images]"))
        else:
            out.contents.append(element)
    return out


def strip_think(text: str) -> str:
    """Removes `<think>…</think>` blocks (the host does it too; this guards hosts that do not)."""
    return _THINK.sub("", text).strip() if "<think>" in text else text


def estimate_message(message: ModelMessage) -> int:
    """The host's estimate of one message (`agentrunner.tokens`, shared with `CountTokens`)."""
    return tokens.message_tokens(message)


def estimate(messages: Iterable[ModelMessage]) -> int:
    return sum(tokens.message_tokens(m) for m in messages)


def estimate_tools(tools: Iterable[common_pb2.ToolDefinition]) -> int:
    return tokens.tool_tokens(tools)
