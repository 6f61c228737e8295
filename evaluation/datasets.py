"""Read BEIR and SQuAD data sets, and import them as a KB's documents plus a golden set.

Readers are pure: they turn files into a `Dataset` or raise `DatasetError` naming the
file and line. `import_dataset` ingests the passages through the real pipeline and
stores the questions with their qrels; running it again on the same files changes
nothing (documents are deduplicated by content hash, questions by id).
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from time import perf_counter
from typing import Any

from django.db import transaction

from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Document, DocumentStatus, IngestionJob, KnowledgeBase
from knowledge.search import refresh_planner_statistics

from .models import GoldenQuestion, GoldenSet, RelevantDocument, split_for


class DatasetError(Exception):
    """A data set file is missing or malformed; the message names the file and line."""


@dataclass(frozen=True)
class Passage:
    id: str
    name: str  # the document name in the KB
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    relevant: dict[str, int]  # passage id -> graded relevance
    reference_answer: str = ""
    # each a string, or a list of alternatives any one of which will do ("encrypted", "加密")
    expected_keywords: tuple[str | list[str], ...] = ()
    category: str = ""
    # "none" (answered), "A", "B" or "C"; blank when the set does not say
    expected_shortcut: str = ""


@dataclass(frozen=True)
class Dataset:
    name: str
    format: str
    source: str
    passages: list[Passage]
    questions: list[Question]
    dropped_qrels: int = 0  # qrels naming a passage that is not in the corpus (or past the limit)


# --- BEIR -----------------------------------------------------------------------------


def read_beir(directory: Path, *, limit_docs: int | None = None) -> Dataset:
    """Read corpus.jsonl, queries.jsonl and qrels/test.tsv; keep queries that have qrels."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory (expected a BEIR folder)")
    passages = _beir_passages(_require(directory / "corpus.jsonl"), limit_docs)
    qrels = _read_qrels(_require(directory / "qrels" / "test.tsv"))
    known = {passage.id for passage in passages}
    questions, dropped = [], 0
    for line, record in _jsonl(_require(directory / "queries.jsonl")):
        qid, text = _field(record, "_id", line), _field(record, "text", line)
        judged = qrels.get(qid, {})
        relevant = {pid: score for pid, score in judged.items() if pid in known}
        dropped += len(judged) - len(relevant)
        if any(score > 0 for score in relevant.values()):
            questions.append(Question(qid, text, relevant))
    return Dataset(directory.name, "beir", str(directory), passages, questions, dropped)


BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")


def read_beir_zip(path: Path, *, max_bytes: int, limit_docs: int | None = None) -> Dataset:
    """Read a BEIR folder uploaded as a zip (the three files at its root or in one folder).

    Only those three members are unpacked, under names chosen here, and only when their
    unpacked size is within max_bytes: a zip bomb or a `../` name cannot reach the disk."""
    try:
        archive = zipfile.ZipFile(_require(path))
    except zipfile.BadZipFile:
        raise DatasetError(f"{path}: not a zip file (expected a BEIR folder zipped)") from None
    with archive, tempfile.TemporaryDirectory() as folder:
        members = {name: _beir_member(archive, name) for name in BEIR_FILES}
        unpacked = sum(member.file_size for member in members.values())
        if unpacked > max_bytes:
            raise DatasetError(f"{path}: unpacks to {unpacked:,} bytes, more than the {max_bytes:,} allowed")
        root = Path(folder) / path.stem
        budget = max_bytes  # counted as unpacked too, in case a member's header understates it
        for name, member in members.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, target.open("wb") as out:
                while piece := source.read(min(1 << 20, budget + 1)):
                    budget -= len(piece)
                    if budget < 0:
                        raise DatasetError(f"{path}: unpacks past the {max_bytes:,} bytes allowed")
                    out.write(piece)
        dataset = read_beir(root, limit_docs=limit_docs)
    return Dataset(path.stem, "beir", path.name, dataset.passages, dataset.questions, dataset.dropped_qrels)


def _beir_member(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    """The member that is `name` at the zip's root or under one top folder."""
    matches = [
        info for info in archive.infolist()
        if not info.is_dir() and (info.filename == name or info.filename.split("/", 1)[-1] == name)
    ]
    if len(matches) != 1:
        found = "none" if not matches else ", ".join(info.filename for info in matches)
        raise DatasetError(f"the zip needs exactly one {name} (found {found})")
    return matches[0]


def _beir_passages(path: Path, limit: int | None) -> list[Passage]:
    passages: list[Passage] = []
    seen: set[str] = set()
    for line, record in _jsonl(path):
        if limit is not None and len(passages) >= limit:
            break
        pid = _field(record, "_id", line)
        if pid in seen:
            raise DatasetError(f"{line}: duplicate _id {pid!r}")
        seen.add(pid)
        title = str(record.get("title") or "").strip()
        text = _field(record, "text", line).strip()
        body = f"{title}\n\n{text}" if title and text else title or text
        passages.append(Passage(pid, f"{pid}.txt", body))
    return passages


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read `query-id corpus-id score` rows (tab separated, header optional)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as handle:
        for number, row in enumerate(handle, start=1):
            parts = row.split()
            if not parts or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise DatasetError(f"{path}:{number}: expected 'query-id corpus-id score', got {row.strip()!r}")
            try:
                score = int(parts[2])
            except ValueError:
                raise DatasetError(f"{path}:{number}: score {parts[2]!r} is not an integer") from None
            qrels.setdefault(parts[0], {})[parts[1]] = score
    return qrels


# --- SQuAD ----------------------------------------------------------------------------


def read_squad(path: Path, *, limit_docs: int | None = None) -> Dataset:
    """Read a SQuAD-format file: each paragraph a passage, its questions relevant to it."""
    try:
        data = json.loads(_require(path).read_text(encoding="utf-8"))["data"]
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except (KeyError, TypeError):
        data = None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: not a SQuAD file (no top-level 'data' list)")
    passages: list[Passage] = []
    questions: list[Question] = []
    titles = [_article_title(article, n) for n, article in enumerate(data)]
    repeated = {title for title, count in Counter(titles).items() if count > 1}
    for n, article in enumerate(data):
        for p, paragraph in enumerate(article.get("paragraphs", []), start=1):
            if limit_docs is not None and len(passages) >= limit_docs:
                return Dataset(path.stem, "squad", str(path), passages, questions)
            stem = titles[n] if titles[n] not in repeated else f"{titles[n]}-{article.get('id', n)}"
            passage = Passage(f"{stem}-{p}", f"{stem}-{p}.txt", _squad_text(path, paragraph, n, p))
            passages.append(passage)
            questions.extend(_squad_question(path, qa, passage.id) for qa in paragraph.get("qas", []))
    return Dataset(path.stem, "squad", str(path), passages, questions)


def _article_title(article: Any, n: int) -> str:
    if not isinstance(article, dict):
        return f"article-{n}"
    return str(article.get("title") or article.get("id") or f"article-{n}").strip().replace("/", "-")


def _squad_text(path: Path, paragraph: Any, article: int, number: int) -> str:
    if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
        raise DatasetError(f"{path}: article {article} paragraph {number} has no 'context' text")
    return paragraph["context"].strip()


def _squad_question(path: Path, qa: Any, passage_id: str) -> Question:
    if not isinstance(qa, dict) or not qa.get("id") or not isinstance(qa.get("question"), str):
        raise DatasetError(f"{path}: a question of passage {passage_id} lacks 'id' or 'question'")
    answers = [a["text"] for a in qa.get("answers", []) if isinstance(a, dict) and a.get("text")]
    first = answers[0] if answers else ""
    return Question(str(qa["id"]), qa["question"].strip(), {passage_id: 1}, first, (first,) if first else ())


# --- shared reading helpers -----------------------------------------------------------


# --- golden JSON -----------------------------------------------------------------------


def read_golden(path: Path, *, limit_docs: int | None = None) -> Dataset:
    """Read questions about documents a KB already holds (relevant: document name -> grade).

    {"name": ..., "questions": [{"id", "question", "relevant": {"doc.md": 2}, "category"?,
    "expected_keywords"?, "reference_answer"?, "expected_shortcut"?}]}. A keyword may be a
    list of alternatives, any one of which an answer may hold. `expected_shortcut`
    is null for a question the chat should answer, or "A", "B", "C"; a question expecting a
    shortcut may have no relevant documents ("not found" questions), and so may a question of
    category "unanswerable" (the documents do not hold its answer; the chat should say so).
    A relevant document may be named by its file name's stem ("design" for "design.md" or
    "design.txt"). Nothing is ingested: `limit_docs` has no meaning here and is ignored.
    """
    try:
        data = json.loads(_require(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise DatasetError(f"{path}: expected an object with a 'questions' list")
    questions = [_golden_question(path, n, item) for n, item in enumerate(data["questions"], start=1)]
    return Dataset(str(data.get("name") or path.stem), "golden", str(path), [], questions)


def _golden_question(path: Path, n: int, item: Any) -> Question:
    where = f"{path}: question {n}"
    if not isinstance(item, dict):
        raise DatasetError(f"{where}: expected an object")
    relevant = item.get("relevant")
    shortcut = _expected_shortcut(where, item)
    may_be_empty = shortcut in SHORTCUTS_WITHOUT_SOURCES or item.get("category") == UNANSWERABLE
    if not isinstance(relevant, dict) or not (relevant or may_be_empty) or not all(isinstance(g, int) for g in relevant.values()):
        raise DatasetError(f"{where}: 'relevant' must map document names to integer grades")
    text, qid = item.get("question"), item.get("id")
    if not isinstance(text, str) or not text.strip() or not isinstance(qid, str) or not qid:
        raise DatasetError(f"{where}: needs a string 'id' and a non-empty 'question'")
    return Question(
        qid, text.strip(), {str(name): grade for name, grade in relevant.items()},
        reference_answer=str(item.get("reference_answer") or ""),
        expected_keywords=tuple(_keyword(k) for k in item.get("expected_keywords") or ()),
        category=str(item.get("category") or ""),
        expected_shortcut=shortcut,
    )


SHORTCUTS_WITHOUT_SOURCES = frozenset({"A", "B", "C"})
# The category of a question the documents cannot answer: scored on whether the answer says so.
UNANSWERABLE = "unanswerable"


def _keyword(value: Any) -> str | list[str]:
    """A keyword, or alternatives for it: an English answer may say "encrypted" for "加密"."""
    return [str(v) for v in value] if isinstance(value, list) else str(value)


def _expected_shortcut(where: str, item: dict) -> str:
    if "expected_shortcut" not in item:
        return ""
    value = item["expected_shortcut"]
    if value is None:
        return "none"
    if value not in ("none", "A", "B", "C"):
        raise DatasetError(f"{where}: 'expected_shortcut' must be null, \"A\", \"B\" or \"C\"")
    return value


def _require(path: Path) -> Path:
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    return path


@dataclass(frozen=True)
class _Line:
    path: Path
    number: int

    def __str__(self) -> str:
        return f"{self.path}:{self.number}"


def _jsonl(path: Path) -> Iterator[tuple[_Line, dict]]:
    """Yield each non-blank line's JSON object with where it came from."""
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            line = _Line(path, number)
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{line}: not valid JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise DatasetError(f"{line}: expected a JSON object")
            yield line, record


def _field(record: dict, key: str, line: _Line) -> str:
    value = record.get(key)
    if value is None or isinstance(value, (dict, list)):
        raise DatasetError(f"{line}: missing or invalid {key!r}")
    return str(value)


# --- importing ------------------------------------------------------------------------


@dataclass
class ImportReport:
    passages: int = 0
    ingested: int = 0
    unchanged: int = 0
    empty: int = 0  # passages with no text, skipped
    failed: list[tuple[str, str]] = field(default_factory=list)  # (passage id, error)
    child_chunks: int = 0
    stage_ms: dict[str, float] = field(default_factory=dict)
    questions: int = 0
    qrels: int = 0
    questions_changed: int = 0
    qrels_changed: int = 0
    skipped_questions: int = 0  # every relevant passage failed or was empty
    seconds: float = 0.0

    @property
    def is_unchanged(self) -> bool:
        return not (self.ingested or self.questions_changed or self.qrels_changed)


ProgressHook = Callable[[int, ImportReport], None]  # (passages done, report so far)
BATCH_SIZE = 200


def import_dataset(
    kb: KnowledgeBase,
    dataset: Dataset,
    *,
    user=None,
    on_batch: ProgressHook = lambda done, report: None,
    batch_size: int = BATCH_SIZE,
) -> ImportReport:
    """Ingest the passages as documents, then store the golden set and its qrels."""
    started = perf_counter()
    report = ImportReport(passages=len(dataset.passages))
    documents: dict[str, int] = {}
    if dataset.format == "golden":  # questions about documents the KB already holds, by name
        documents = documents_by_name(kb)
    for start in range(0, len(dataset.passages), batch_size):
        batch = dataset.passages[start : start + batch_size]
        documents.update(_ingest_batch(kb, dataset, batch, report, user=user))
        on_batch(start + len(batch), report)
    store_golden_set(kb, dataset, documents, report)
    refresh_planner_statistics()
    report.seconds = perf_counter() - started
    return report


def documents_by_name(kb: KnowledgeBase) -> dict[str, int]:
    """The KB's ready documents by name, and by the name's stem where no other document has it:
    a set naming "design" scores the same file uploaded as design.md or as design.txt."""
    names = dict(Document.objects.filter(kb=kb, status=DocumentStatus.READY).values_list("name", "pk"))
    stems = Counter(PurePosixPath(name).stem for name in names)
    by_stem = {PurePosixPath(name).stem: pk for name, pk in names.items() if stems[PurePosixPath(name).stem] == 1}
    return {**{stem: pk for stem, pk in by_stem.items() if stem not in names}, **names}


def _ingest_batch(kb, dataset: Dataset, batch: list[Passage], report: ImportReport, *, user) -> dict[str, int]:
    """Submit a batch in one transaction, then run the pipeline on what needs it."""
    documents: dict[str, int] = {}
    pending: dict[int, list[str]] = {}  # document -> passages (duplicates share one)
    with transaction.atomic():
        for passage in batch:
            if not passage.text:
                report.empty += 1
                continue
            outcome = submit_document(
                kb, passage.name, passage.text.encode("utf-8"), enqueue=_ingested_here,
                source=f"{dataset.source}#{passage.id}", user=user,
            )
            if outcome.status == "rejected":
                report.failed.append((passage.id, outcome.message))
            elif outcome.status == "queued" or outcome.document.status != DocumentStatus.READY:
                # Unchanged but not ready: an interrupted import; finish it now.
                pending.setdefault(outcome.document.pk, []).append(passage.id)
            else:
                report.unchanged += 1
                documents[passage.id] = outcome.document.pk
    for document_id, passage_ids in pending.items():
        if _ingest(document_id, report):
            documents.update(dict.fromkeys(passage_ids, document_id))
        else:
            error = Document.objects.filter(pk=document_id).values_list("error", flat=True).first()
            report.failed.extend((passage_id, error or "ingestion failed") for passage_id in passage_ids)
    return documents


def _ingested_here(document_id: int) -> None:
    """The importer runs the pipeline itself, right after the batch commits."""


def _ingest(document_id: int, report: ImportReport) -> bool:
    job: IngestionJob | None = run_ingestion(document_id)
    document = Document.objects.filter(pk=document_id).only("status", "chunk_count").first()
    if document is None or document.status != DocumentStatus.READY:
        return False
    report.ingested += 1
    report.child_chunks += document.chunk_count
    for stage, ms in (job.timings_ms if job else {}).items():
        report.stage_ms[stage] = report.stage_ms.get(stage, 0.0) + ms
    return True


@transaction.atomic
def store_golden_set(kb: KnowledgeBase, dataset: Dataset, documents: dict[str, int], report: ImportReport) -> GoldenSet:
    """Create or update the data set's golden set: questions by id, qrels by document."""
    golden_set, _ = GoldenSet.objects.get_or_create(
        kb=kb, name=dataset.name, defaults={"source": dataset.source, "format": dataset.format}
    )
    existing = {question.qid: question for question in golden_set.questions.prefetch_related("qrels")}
    for item in dataset.questions:
        relevant = {documents[pid]: score for pid, score in item.relevant.items() if pid in documents}
        expects_none = item.expected_shortcut in SHORTCUTS_WITHOUT_SOURCES or item.category == UNANSWERABLE
        if not any(score > 0 for score in relevant.values()) and not expects_none:
            report.skipped_questions += 1
            continue
        question = _save_question(golden_set, existing.get(item.id), item, report)
        _save_qrels(question, relevant, report)
        report.questions += 1
        report.qrels += len(relevant)
    return golden_set


def _save_question(golden_set, question: GoldenQuestion | None, item: Question, report) -> GoldenQuestion:
    values = {
        "text": item.text,
        "reference_answer": item.reference_answer,
        "expected_keywords": list(item.expected_keywords),
        "category": item.category,
        "expected_shortcut": item.expected_shortcut,
    }
    if question is None:
        report.questions_changed += 1
        return GoldenQuestion.objects.create(golden_set=golden_set, qid=item.id, split=split_for(item.id), **values)
    if any(getattr(question, name) != value for name, value in values.items()):
        report.questions_changed += 1
        for name, value in values.items():
            setattr(question, name, value)
        question.save()
    return question


def _save_qrels(question: GoldenQuestion, relevant: dict[int, int], report: ImportReport) -> None:
    stored = {qrel.document_id: qrel.relevance for qrel in question.qrels.all()}
    if stored == relevant:
        return
    report.qrels_changed += 1
    question.qrels.all().delete()
    RelevantDocument.objects.bulk_create(
        RelevantDocument(question=question, document_id=document_id, relevance=score)
        for document_id, score in relevant.items()
    )


def export_golden_set(golden_set: GoldenSet) -> str:
    """The set as the golden JSON format `import_dataset --format golden` reads."""
    questions = golden_set.questions.prefetch_related("qrels__document").order_by("pk")
    items = []
    for question in questions:
        item = {"id": question.qid, "question": question.text,
                "relevant": {qrel.document.name: qrel.relevance for qrel in question.qrels.all()}}
        if question.category:
            item["category"] = question.category
        if question.expected_keywords:
            item["expected_keywords"] = question.expected_keywords
        if question.reference_answer:
            item["reference_answer"] = question.reference_answer
        if question.expected_shortcut:
            item["expected_shortcut"] = None if question.expected_shortcut == "none" else question.expected_shortcut
        items.append(item)
    return json.dumps({"name": golden_set.name, "questions": items}, ensure_ascii=False, indent=1)
