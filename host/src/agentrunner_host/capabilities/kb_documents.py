"""Documents of the built-in knowledge bases: which files are read, their text, title and metadata
(HTML through `html-text` on lxml, Markdown front matter through `python-frontmatter`), and their chunks.

The parsers are imported when the first document of their kind is read, not when the host starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import structlog
import yaml

log = structlog.get_logger(__name__)

SUPPORTED_SUFFIXES = {".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown",
                      ".html": "text/html", ".htm": "text/html"}  # fmt: skip


def _html(raw: str) -> tuple[str, str]:
    """(title, text) of an HTML page: scripts and styles dropped, blocks separated by blank lines."""
    import html_text
    import lxml.etree
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(raw)
    except (ValueError, lxml.etree.ParserError):
        return "", ""
    title = " ".join((tree.findtext(".//title") or "").split())
    for node in list(tree.iter("title")):
        cast("lxml.html.HtmlElement", node).drop_tree()
    return title, html_text.extract_text(tree, guess_layout=True)


def _markdown(path: Path, raw: str) -> tuple[str, str, dict[str, Any]]:
    import frontmatter

    try:
        post = frontmatter.loads(raw)
    except (yaml.YAMLError, ValueError):
        log.warning("kb_front_matter_invalid", path=str(path))
        return "", raw, {}
    meta = {str(k): v for k, v in post.metadata.items() if isinstance(v, str | int | float | bool)}
    heading = re.search(r"^#\s+(.+)$", post.content, re.MULTILINE)
    title = str(meta.get("title") or (heading.group(1).strip() if heading else ""))
    return title, post.content, meta


def parse_document(path: Path, raw: str) -> tuple[str, str, dict[str, Any]]:
    """(title, body text, metadata) of a file; Markdown front matter becomes metadata."""
    suffix = path.suffix.lower()
    meta: dict[str, Any] = {}
    if suffix in (".html", ".htm"):
        title, body = _html(raw)
    elif suffix in (".md", ".markdown"):
        title, body, meta = _markdown(path, raw)
    else:
        body = raw
        first = next((line.strip() for line in body.splitlines() if line.strip()), "")
        title = first if len(first) <= 80 else ""
    body = re.sub(r"[ \t]+", " ", body)
    body = re.sub(r"\n\s*\n+", "\n\n", body).strip()
    return title or path.stem, body, meta


def chunk_text(body: str, chunk_chars: int) -> list[str]:
    """Paragraph-packed chunks of at most `chunk_chars` characters (long paragraphs split on words)."""
    pieces: list[str] = []
    for para in (p.strip() for p in body.split("\n\n")):
        if not para:
            continue
        while len(para) > chunk_chars:
            cut = para.rfind(" ", 0, chunk_chars)
            cut = cut if cut > chunk_chars // 2 else chunk_chars
            pieces.append(para[:cut].strip())
            para = para[cut:].strip()
        if para:
            pieces.append(para)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 2 + len(piece) > chunk_chars:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks
