"""Knowledge benchmark: ingest a generated corpus into a built-in knowledge base with an embedding model,
then time hybrid retrieval (full text + vectors, rank-fused) through `KnowledgeService`, on the embedded
default (SQLite) or the database given. The embedder is in process (a hashed bag of words), so the
figures are the host's own work: parsing, chunking, storing, searching. Prints
`knowledge_ingest_chunks_per_s=… knowledge_ingest_cpu_s=… knowledge_retrieve_p50_ms=… knowledge_retrieve_p95_ms=…`;
the ingest CPU (this process, every thread) is the figure to compare on a loaded machine.

Usage: `uv run python bench/bench_knowledge.py [--docs N] [--queries N] [--database-url URL]`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agentrunner_host.capabilities.knowledge import KnowledgeBaseConfig, KnowledgeService
from agentrunner_host.store.db import Database
from agentrunner_host.store.migrate import upgrade

DIM = 256
VOCABULARY = [f"w{i}" for i in range(3000)]


def embed_one(text: str) -> list[float]:
    vec = [0.0] * DIM
    for word in text.lower().split():
        digest = hashlib.blake2b(word.encode(), digest_size=5).digest()
        vec[int.from_bytes(digest[:4], "big") % DIM] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


async def embed(texts: Sequence[str]) -> list[list[float]]:
    return [embed_one(t) for t in texts]


def write_corpus(root: Path, docs: int, rng: random.Random) -> None:
    for i in range(docs):
        paragraphs = [
            " ".join(rng.choices(VOCABULARY, k=rng.randint(60, 160))) for _ in range(rng.randint(3, 8))
        ]
        if i % 5 == 0:  # some HTML, the rest Markdown with front matter
            body = "".join(f"<p>{p}</p>" for p in paragraphs)
            (root / f"doc{i}.html").write_text(
                f"<html><head><title>Doc {i}</title></head><body>{body}</body></html>"
            )
        else:
            text = "\n\n".join(paragraphs)
            (root / f"doc{i}.md").write_text(
                f"---\ntitle: Doc {i}\ntopic: t{i % 7}\n---\n# Doc {i}\n\n{text}\n"
            )


async def run(
    url: str, corpus: Path, queries: int, rng: random.Random
) -> tuple[int, float, float, list[float]]:
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    try:
        config = KnowledgeBaseConfig(id="kb", name="Bench", embedding_model="e")
        knowledge = KnowledgeService(db.engine, [config], embedder_for=lambda _model: embed)
        started, cpu = time.perf_counter(), time.process_time()
        report = await knowledge.ingest("kb", corpus)
        ingest_s, ingest_cpu = time.perf_counter() - started, time.process_time() - cpu
        latencies = []
        for _ in range(queries):
            query = " ".join(rng.choices(VOCABULARY, k=rng.randint(2, 6)))
            started = time.perf_counter()
            found = await knowledge.retrieve("kb", query, top_k=5)
            latencies.append(time.perf_counter() - started)
            assert found, query
        return report.chunks, ingest_s, ingest_cpu, latencies
    finally:
        await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    rng = random.Random(23)
    with tempfile.TemporaryDirectory(prefix="agentrunner-bench-kb-") as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        write_corpus(corpus, args.docs, rng)
        url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'kb.db'}"
        chunks, ingest_s, ingest_cpu, latencies = asyncio.run(run(url, corpus, args.queries, rng))
    p50 = statistics.median(latencies) * 1000
    p95 = statistics.quantiles(latencies, n=20)[-1] * 1000
    print(
        f"knowledge_ingest_chunks_per_s={chunks / ingest_s:.0f} knowledge_ingest_cpu_s={ingest_cpu:.2f} "
        f"knowledge_retrieve_p50_ms={p50:.2f} "
        f"knowledge_retrieve_p95_ms={p95:.2f} (chunks={chunks}, ingest {ingest_s:.1f} s, "
        f"{len(latencies)} queries, {'SQLite' if not args.database_url else 'given database'})"
    )


if __name__ == "__main__":
    main()
