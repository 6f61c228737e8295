from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from evaluation.datasets import DatasetError, read_beir, read_golden, read_squad
from evaluation.models import GoldenQuestion, GoldenSet, RelevantDocument, split_for
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase

from .conftest import CORPUS, QUERIES, write_beir, write_jsonl

pytestmark = pytest.mark.django_db


def _import(*args) -> str:
    out = io.StringIO()
    call_command("import_dataset", *args, stdout=out)
    return out.getvalue()


def _qrels(kb) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for qid, name, relevance in RelevantDocument.objects.filter(question__golden_set__kb=kb).values_list(
        "question__qid", "document__name", "relevance"
    ):
        found.setdefault(qid, {})[name] = relevance
    return found


def test_it_imports_a_beir_folder_through_the_pipeline(beir_dir, alice):
    out = _import(str(beir_dir), "--format", "beir", "--kb", "tiny", "--owner", "alice")

    kb = KnowledgeBase.objects.get(slug="tiny")
    assert kb.owner == alice
    documents = Document.objects.filter(kb=kb)
    assert sorted(documents.values_list("name", flat=True)) == [f"d{n}.txt" for n in range(1, 6)]
    assert set(documents.values_list("status", flat=True)) == {DocumentStatus.READY}
    first = documents.get(name="d1.txt")
    assert bytes(first.file.data).decode() == f"{CORPUS[0]['title']}\n\n{CORPUS[0]['text']}"
    assert Chunk.objects.filter(document=first, level=Chunk.CHILD).exists()
    golden_set = GoldenSet.objects.get(kb=kb)
    assert (golden_set.name, golden_set.format) == ("tiny-beir", "beir")
    # q6 has no qrels; q7's only relevant passage is empty; "missing" is not in the corpus.
    assert _qrels(kb) == {
        "q1": {"d2.txt": 2}, "q2": {"d1.txt": 1}, "q3": {"d4.txt": 2, "d3.txt": 1},
        "q4": {"d5.txt": 1}, "q5": {"d3.txt": 2},
    }
    for question in GoldenQuestion.objects.all():
        assert question.split == split_for(question.qid)
    assert "imported: 5 documents" in out and "5 questions, 6 qrels" in out
    assert "skipped 1 empty passages" in out and "skipped 1 qrels naming unknown passages" in out


def test_it_reports_unchanged_on_a_second_import(beir_dir, alice):
    _import(str(beir_dir), "--format", "beir", "--kb", "tiny")
    counts = (Document.objects.count(), Chunk.objects.count(), GoldenQuestion.objects.count())

    out = _import(str(beir_dir), "--format", "beir", "--kb", "tiny")

    assert "unchanged: 5 documents (0 ingested, 5 unchanged" in out
    assert (Document.objects.count(), Chunk.objects.count(), GoldenQuestion.objects.count()) == counts


def test_it_updates_changed_questions_and_qrels_on_reimport(beir_dir, alice):
    _import(str(beir_dir), "--format", "beir", "--kb", "tiny")
    queries = [dict(q, text="heat flow in slabs") if q["_id"] == "q1" else q for q in QUERIES]
    write_beir(beir_dir, queries=queries, qrels=[("q1", "d2", 1), ("q2", "d1", 1)])

    out = _import(str(beir_dir), "--format", "beir", "--kb", "tiny")

    assert "imported: 5 documents (0 ingested" in out
    assert GoldenQuestion.objects.get(qid="q1").text == "heat flow in slabs"
    assert _qrels(KnowledgeBase.objects.get(slug="tiny"))["q1"] == {"d2.txt": 1}


def test_it_limits_the_passages_and_keeps_questions_judged_on_them(beir_dir, alice):
    _import(str(beir_dir), "--format", "beir", "--kb", "tiny", "--limit-docs", "2")

    assert sorted(Document.objects.values_list("name", flat=True)) == ["d1.txt", "d2.txt"]
    assert sorted(GoldenQuestion.objects.values_list("qid", flat=True)) == ["q1", "q2"]


def test_it_creates_the_kb_for_the_first_superuser_or_an_evaluation_user(beir_dir, alice, django_user_model):
    _import(str(beir_dir), "--format", "beir", "--kb", "plain", "--limit-docs", "1")
    admin = django_user_model.objects.create_superuser("root", password="root-password")
    _import(str(beir_dir), "--format", "beir", "--kb", "super", "--limit-docs", "1")

    assert KnowledgeBase.objects.get(slug="plain").owner.username == "evaluation"
    assert not KnowledgeBase.objects.get(slug="plain").owner.has_usable_password()
    assert KnowledgeBase.objects.get(slug="super").owner == admin


def test_it_imports_a_squad_file_with_each_paragraph_as_a_document(squad_file, alice):
    out = _import(str(squad_file), "--format", "squad", "--kb", "zh")

    kb = KnowledgeBase.objects.get(slug="zh")
    # Two articles share a title, so their names carry the article id; A3 has no title.
    assert sorted(Document.objects.filter(kb=kb).values_list("name", flat=True)) == [
        "A3-1.txt", "Great Wall-A1-1.txt", "Great Wall-A1-2.txt", "Great Wall-A2-1.txt",
    ]
    assert _qrels(kb) == {
        "A1-Q1": {"Great Wall-A1-1.txt": 1}, "A1-Q2": {"Great Wall-A1-2.txt": 1},
        "A2-Q1": {"Great Wall-A2-1.txt": 1}, "A2-Q2": {"Great Wall-A2-1.txt": 1},
        "A3-Q1": {"A3-1.txt": 1},
    }
    question = GoldenQuestion.objects.get(qid="A1-Q1")
    assert (question.reference_answer, question.expected_keywords) == ("山海关", ["山海关"])
    assert GoldenQuestion.objects.get(qid="A2-Q2").reference_answer == ""
    assert "4 documents" in out and "5 questions, 5 qrels" in out


def test_it_rejects_an_unknown_owner_and_a_bad_slug(beir_dir):
    with pytest.raises(CommandError, match="user 'nobody' does not exist"):
        _import(str(beir_dir), "--format", "beir", "--kb", "tiny", "--owner", "nobody")
    with pytest.raises(CommandError, match="not a valid KB slug"):
        _import(str(beir_dir), "--format", "beir", "--kb", "no spaces")
    assert not KnowledgeBase.objects.exists()


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_it_names_a_missing_file(beir_dir, missing):
    (beir_dir / missing).unlink()

    with pytest.raises(CommandError, match=rf"{missing}: no such file"):
        _import(str(beir_dir), "--format", "beir", "--kb", "tiny")
    assert not Document.objects.exists()


def test_it_names_a_missing_folder(tmp_path):
    with pytest.raises(CommandError, match="not a directory"):
        _import(str(tmp_path / "nowhere"), "--format", "beir", "--kb", "tiny")


def test_it_names_the_file_and_line_of_malformed_json(beir_dir):
    lines = (beir_dir / "corpus.jsonl").read_text().splitlines()
    lines[2] = '{"_id": "d3", "title": "broken'
    (beir_dir / "corpus.jsonl").write_text("\n".join(lines) + "\n")

    with pytest.raises(CommandError, match=r"corpus\.jsonl:3: not valid JSON"):
        _import(str(beir_dir), "--format", "beir", "--kb", "tiny")
    assert not Document.objects.exists() and not KnowledgeBase.objects.exists()


@pytest.mark.parametrize(
    ("file", "rows", "message"),
    [
        ("queries.jsonl", [{"_id": "q1"}], r"queries\.jsonl:1: missing or invalid 'text'"),
        ("corpus.jsonl", [{"title": "no id", "text": "x"}], r"corpus\.jsonl:1: missing or invalid '_id'"),
        ("corpus.jsonl", [["not", "an", "object"]], r"corpus\.jsonl:1: expected a JSON object"),
        ("corpus.jsonl", [CORPUS[0], CORPUS[0]], r"corpus\.jsonl:2: duplicate _id 'd1'"),
    ],
)
def test_it_names_the_line_of_an_invalid_record(beir_dir, file, rows, message):
    write_jsonl(beir_dir / file, rows)

    with pytest.raises(DatasetError, match=message):
        read_beir(beir_dir)


def test_it_names_the_line_of_a_bad_qrel(beir_dir):
    (beir_dir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\thigh\n")
    with pytest.raises(DatasetError, match=r"test\.tsv:2: score 'high' is not an integer"):
        read_beir(beir_dir)
    (beir_dir / "qrels" / "test.tsv").write_text("q1\td2\n")
    with pytest.raises(DatasetError, match=r"test\.tsv:1: expected 'query-id corpus-id score'"):
        read_beir(beir_dir)


def test_it_names_a_broken_squad_file(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"title": "x",\n')
    with pytest.raises(CommandError, match=r"broken\.json:3: not valid JSON"):
        _import(str(broken), "--format", "squad", "--kb", "zh")

    broken.write_text(json.dumps({"articles": []}))
    with pytest.raises(DatasetError, match="not a SQuAD file"):
        read_squad(broken)
    broken.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"qas": []}]}]}))
    with pytest.raises(DatasetError, match="article 0 paragraph 1 has no 'context'"):
        read_squad(broken)


def test_it_keeps_the_squad_limit(squad_file):
    dataset = read_squad(squad_file, limit_docs=2)

    assert [p.id for p in dataset.passages] == ["Great Wall-A1-1", "Great Wall-A1-2"]
    assert [q.id for q in dataset.questions] == ["A1-Q1", "A1-Q2"]


def test_it_maps_duplicate_passages_to_one_document(tmp_path, alice):
    corpus = [*CORPUS[:2], {"_id": "copy", "title": CORPUS[1]["title"], "text": CORPUS[1]["text"]}]
    folder = write_beir(tmp_path / "dups", corpus=corpus, qrels=[("q1", "copy", 1), ("q2", "d1", 1)])

    _import(str(folder), "--format", "beir", "--kb", "dups")

    assert Document.objects.count() == 2
    assert _qrels(KnowledgeBase.objects.get(slug="dups"))["q1"] == {"d2.txt": 1}
    assert get_user_model().objects.filter(username="evaluation").exists()


def test_it_splits_questions_by_a_stable_hash_of_their_id():
    splits = [split_for(f"query-{n}") for n in range(2000)]

    assert split_for("query-7") == splits[7]
    assert 0.65 < splits.count("train") / len(splits) < 0.75
    assert set(splits) == {"train", "test"}


def test_it_finishes_documents_an_interrupted_import_left_pending(beir_dir, alice):
    from knowledge.ingest import submit_document

    kb = KnowledgeBase.objects.create(slug="tiny", name="tiny", owner=alice)
    body = f"{CORPUS[0]['title']}\n\n{CORPUS[0]['text']}".encode()
    submit_document(kb, "d1.txt", body, enqueue=lambda document_id: None)

    out = _import(str(beir_dir), "--format", "beir", "--kb", "tiny")

    assert "5 ingested" in out
    assert Document.objects.get(name="d1.txt").status == DocumentStatus.READY


def _golden(tmp_path, questions) -> str:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({"name": "handbook", "questions": questions}), encoding="utf-8")
    return str(path)


def test_it_imports_golden_questions_about_the_documents_a_kb_holds(beir_dir, alice, tmp_path):
    _import(str(beir_dir), "--format", "beir", "--kb", "tiny")
    path = _golden(tmp_path, [
        {"id": "g1", "question": "Which passage?", "relevant": {"d2.txt": 2, "d3.txt": 1}, "category": "api",
         "expected_keywords": ["429"]},
        {"id": "g2", "question": "Not in this KB", "relevant": {"nowhere.md": 2}},
    ])

    out = _import(path, "--format", "golden", "--kb", "tiny")

    kb = KnowledgeBase.objects.get(slug="tiny")
    question = GoldenQuestion.objects.get(golden_set__kb=kb, golden_set__name="handbook")
    assert (question.qid, question.category, question.expected_keywords) == ("g1", "api", ["429"])
    assert _qrels(kb)["g1"] == {"d2.txt": 2, "d3.txt": 1}
    assert "1 questions, 2 qrels" in out and "skipped 1 questions without an imported relevant document" in out
    assert Document.objects.filter(kb=kb).count() == 5  # nothing ingested


def test_golden_questions_need_an_existing_kb(tmp_path):
    path = _golden(tmp_path, [{"id": "g1", "question": "q", "relevant": {"a.md": 1}}])

    with pytest.raises(CommandError, match="'nowhere' does not exist: golden questions ask about its documents"):
        _import(path, "--format", "golden", "--kb", "nowhere")
    assert not KnowledgeBase.objects.filter(slug="nowhere").exists()


@pytest.mark.parametrize(("questions", "message"), [
    ([{"id": "g1", "question": "q", "relevant": {}}], "question 1: 'relevant' must map document names"),
    ([{"id": "g1", "question": "q", "relevant": {"a.md": "high"}}], "question 1: 'relevant' must map"),
    ([{"id": "g1", "question": " ", "relevant": {"a.md": 1}}], "question 1: needs a string 'id'"),
    (["just text"], "question 1: expected an object"),
])
def test_it_names_the_broken_golden_question(tmp_path, questions, message):
    with pytest.raises(DatasetError, match=message):
        read_golden(Path(_golden(tmp_path, questions)))


def test_the_shipped_demo_golden_set_names_only_documents_of_the_demo_kb():
    from django.conf import settings

    dataset = read_golden(Path(settings.BASE_DIR) / "evaluation" / "fixtures" / "demo-golden.json")
    docs = {path.name for path in (Path(settings.BASE_DIR) / "evaluation" / "corpus" / "docs").glob("*.md")}

    assert len(dataset.questions) >= 20 and len({q.category for q in dataset.questions}) >= 10
    assert {name for q in dataset.questions for name in q.relevant} <= docs


# The sets over the frozen docs corpus; the seeds dev sets are about documents tests never read.
SHIPPED_SETS = sorted(
    path for path in (Path(__file__).resolve().parents[1] / "fixtures").glob("*.json")
    if not path.name.startswith("seeds-")
)


@pytest.mark.parametrize("path", SHIPPED_SETS, ids=[path.stem for path in SHIPPED_SETS])
def test_every_shipped_answer_keyword_is_written_in_a_document_that_states_it(path):
    # The sets are scored on the frozen corpus; a new corpus that rewords a fact ("16" →
    # "Sixteen") would leave a question no answer can pass.
    docs_dir = path.parents[1] / "corpus" / "docs"
    docs = {doc.name: doc.read_text(encoding="utf-8").lower() for doc in docs_dir.glob("*.md")}
    unreachable = []
    for question in json.loads(path.read_text(encoding="utf-8"))["questions"]:
        stating = [docs[name] for name, grade in question["relevant"].items() if grade == 2]
        assert set(question["relevant"]) <= set(docs), question["id"]
        for keyword in question.get("expected_keywords", []):
            alternatives = [keyword] if isinstance(keyword, str) else keyword
            if stating and not any(alt.lower() in text for alt in alternatives for text in stating):
                unreachable.append((question["id"], keyword))
    assert unreachable == []
