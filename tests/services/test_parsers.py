"""The service toolkit's incremental parsers fed the same bodies split at every byte boundary: inside
UTF-8 sequences, inside `data:` prefixes, inside JSON values, between the two newlines of an event
terminator. Each split must give exactly what the unsplit body gives."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agentrunner.services import InvalidJson, JsonLines, JsonSequence, ThinkSplitter, Upstream


def splits(body: bytes) -> Iterator[list[bytes]]:
    """The body whole, byte by byte, and cut in two at every position."""
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    for i in range(1, len(body)):
        yield [body[:i], body[i:]]


def run_parser(factory, chunks: list[bytes]) -> list[Any]:
    parser = factory()
    out = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    return out


N8N = (
    '{"type":"begin","metadata":{"nodeId":"n1"}}{"type":"item","content":"Grüße 😀 {not} \\"quoted\\" \\\\"}\n'
    '{"type":"item","content":"[]"}\r\n\n{"type":"end"}'
).encode()


def test_concatenated_and_newline_separated_objects_any_split() -> None:
    expected = [
        {"type": "begin", "metadata": {"nodeId": "n1"}},
        {"type": "item", "content": 'Grüße 😀 {not} "quoted" \\'},
        {"type": "item", "content": "[]"},
        {"type": "end"},
    ]
    for chunks in splits(N8N):
        assert run_parser(JsonSequence, chunks) == expected, chunks


def test_pretty_printed_body_and_scalars() -> None:
    body = json.dumps({"response": "Hallo Welt — ok", "n": [1, 2, {"x": None}]}, indent=2, ensure_ascii=False)
    body_bytes = (body + "\n").encode()
    for chunks in splits(body_bytes):
        assert run_parser(JsonSequence, chunks) == [json.loads(body)]
    for chunks in splits(b' "a b" 42 true{"k":1}'):
        assert run_parser(JsonSequence, chunks) == ["a b", 42, True, {"k": 1}]


def test_data_prefixed_values_separated_by_blank_lines() -> None:
    body = (
        'data: {"event":"token","data":{"chunk":"日本"}}\n\n'
        '{"event":"token","data":{"chunk":"語"}}\n\n'
        'data:{"event":"end","data":{"result":{}}}\n\n'
    ).encode()
    expected = [
        {"event": "token", "data": {"chunk": "日本"}},
        {"event": "token", "data": {"chunk": "語"}},
        {"event": "end", "data": {"result": {}}},
    ]
    for chunks in splits(body):
        assert run_parser(lambda: JsonSequence(data_prefix=True), chunks) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a": }', "invalid JSON"),
        (b'{"a": 1}{"b": [1, 2', "ends inside a JSON value"),
        (b'{"a": 1} garbage', "invalid JSON"),
        (b"dat", "data:"),
    ],
)
def test_invalid_or_truncated_json_is_an_error(body: bytes, message: str) -> None:
    with pytest.raises(InvalidJson, match=message):
        run_parser(lambda: JsonSequence(data_prefix=True), [body])


def test_json_lines_any_split_and_invalid_lines() -> None:
    body = 'data: {"a":"ü"}\n\n{"b":2}\r\n{"c":"x"}'.encode()
    for chunks in splits(body):
        assert run_parser(JsonLines, chunks) == [{"a": "ü"}, {"b": 2}, {"c": "x"}]
    with pytest.raises(InvalidJson):
        run_parser(JsonLines, [b'{"a":1}\nnot json\n'])
    parser = JsonLines(skip_invalid=True)
    assert parser.feed(b'{"a":1}\nnot json\n{"b":2}\n') == [{"a": 1}, {"b": 2}]
    assert parser.skipped == 1


def test_think_splitter_any_split() -> None:
    text = "<think>Überlege 🤔</think>\n\nDie Antwort: <thin k> bleibt."
    for cut in range(len(text) + 1):
        splitter = ThinkSplitter()
        answer, reasoning = zip(
            splitter.feed(text[:cut]), splitter.feed(text[cut:]), splitter.close(), strict=True
        )
        assert "".join(answer) == "Die Antwort: <thin k> bleibt."
        assert "".join(reasoning) == "Überlege 🤔"


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


SSE = (
    ": keep-alive comment\n"
    "event: message\n"
    'data: {"event":"message","answer":"Grüß"}\n\n'
    "event: ping\r\n\r\n"
    'data: {"event":"message","answer":"ö 😀"}\r\n\r\n'
    "id:2\nevent:conversation.message.delta\n"
    'data:{"content":"multi"}\n'
    'data:{"line":2}\n\n'
).encode()


async def sse_events(chunks: list[bytes]) -> list[tuple[str, str]]:
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream; charset=utf-8"}, stream=Chunks(chunks)
    )
    upstream = Upstream("test", timeout=5)
    return [(e.event, e.data) async for e in upstream.sse(response)]


@pytest.mark.asyncio
async def test_sse_any_split() -> None:
    expected = [
        ("message", '{"event":"message","answer":"Grüß"}'),
        ("ping", ""),
        ("message", '{"event":"message","answer":"ö 😀"}'),
        ("conversation.message.delta", '{"content":"multi"}\n{"line":2}'),
    ]
    for chunks in splits(SSE):
        assert await sse_events(chunks) == expected, chunks


@pytest.mark.asyncio
async def test_json_body_instead_of_an_event_stream_is_an_api_error() -> None:
    response = httpx.Response(
        200, headers={"content-type": "application/json"}, stream=Chunks([b'{"code":4100,"msg":"bad token"}'])
    )
    with pytest.raises(Exception) as info:
        [e async for e in Upstream("coze", timeout=5).sse(response)]
    assert getattr(info.value, "code", "") == "coze.api_error" and "bad token" in str(info.value)
