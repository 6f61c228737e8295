"""Speed benchmarks run by `manage.py bench`: they measure and print, they never assert."""

from __future__ import annotations

import json
import resource
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

from knowledge.analysis import analyze
from knowledge.batch import FileToIngest, ingest_file
from knowledge.chunking import chunk_document
from knowledge.indexing import embedder_for
from knowledge.models import KnowledgeBase
from knowledge.parsing import ParsedDocument, Section


@dataclass
class IngestBenchReport:
    files: int = 0
    ingested: int = 0
    failed: int = 0
    megabytes: float = 0.0
    child_chunks: int = 0
    parent_chunks: int = 0
    wall_s: float = 0.0
    stage_ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    peak_rss_mb: float = 0.0
    warm_up_s: float = 0.0

    def as_dict(self) -> dict:
        wall = max(self.wall_s, 1e-9)
        core = sum(self.stage_ms.get(s, 0.0) for s in ("parse", "chunk", "store")) / 1000
        embedding = self.stage_ms.get("embed", 0.0) / 1000
        return {
            "files": self.files,
            "ingested": self.ingested,
            "failed": self.failed,
            "megabytes": round(self.megabytes, 3),
            "child_chunks": self.child_chunks,
            "parent_chunks": self.parent_chunks,
            "wall_s": round(self.wall_s, 3),
            "documents_per_s": round(self.ingested / wall, 1),
            "child_chunks_per_s": round(self.child_chunks / wall, 1),
            "child_chunks_per_s_parse_chunk_store": round(self.child_chunks / max(core, 1e-9), 1),
            "chunks_per_s_embedding (parents + children)": round(
                (self.child_chunks + self.parent_chunks) / embedding, 1) if embedding else None,
            "mb_per_s": round(self.megabytes / wall, 3),
            "stage_ms_total": {k: round(v, 1) for k, v in self.stage_ms.items()},
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "warm_up_s (dictionaries and models, once per process)": round(self.warm_up_s, 3),
        }


def bench_ingest(kb: KnowledgeBase, items: list[FileToIngest]) -> IngestBenchReport:
    """Ingest files in this process and measure throughput and time per stage."""
    report = IngestBenchReport(files=len(items))
    started = perf_counter()
    warm_up(kb)
    report.warm_up_s = perf_counter() - started
    started = perf_counter()
    for item in items:
        result = ingest_file(kb, item, on_progress=lambda progress: None)
        if result.status != "ingested":
            report.failed += result.status == "failed"
            continue
        report.ingested += 1
        report.megabytes += item.file.stat().st_size / 1_000_000
        document = kb.documents.get(pk=result.document_id)
        report.child_chunks += document.chunk_count
        report.parent_chunks += document.parent_count
        for stage, ms in (result.job.timings_ms if result.job else {}).items():
            report.stage_ms[stage] += ms
    report.wall_s = perf_counter() - started
    report.peak_rss_mb = _peak_rss_mb()
    return report


def warm_up(kb: KnowledgeBase) -> None:
    """Load what every process loads once (segmentation dictionaries, the embedder)."""
    sample = ParsedDocument("warm-up", (Section("1", "预热", 1, "预热", "", "分词词典与模型的一次性加载。Warm up."),))
    parents = chunk_document(sample)
    embedder_for(kb).embed_passages([parents[0].text])
    analyze(parents[0].text)


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def write_squad_corpus(squad_file: Path, out_dir: Path, *, paragraphs_per_file: int) -> int:
    """Write a SQuAD file's paragraphs out as Markdown files, one titled section each."""
    data = json.loads(squad_file.read_text(encoding="utf-8"))["data"]
    paragraphs = [
        (article.get("title") or article.get("id") or f"article {n}", p["context"])
        for n, article in enumerate(data)
        for p in article["paragraphs"]
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    files = 0
    for start in range(0, len(paragraphs), paragraphs_per_file):
        batch = paragraphs[start : start + paragraphs_per_file]
        body = "\n\n".join(f"## {n}. {title}\n\n{text}" for n, (title, text) in enumerate(batch, 1))
        (out_dir / f"part-{files:04d}.md").write_text(f"# Part {files}\n\n{body}\n", encoding="utf-8")
        files += 1
    return files
