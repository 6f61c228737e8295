"""Evaluation in the browser: golden sets, runs in the background, comparison, access."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from evaluation.jobs import RunRequest, execute_run, queue_run
from evaluation.models import EvaluationRun, GoldenQuestion, GoldenSet, RunStatus
from evaluation.pages import category_chart
from evaluation.runner import evaluate, load_questions

pytestmark = pytest.mark.django_db


def home(kb) -> str:
    return reverse("evaluation-home", args=[kb.slug])


def start(client, kb, capture, **data):
    with capture(execute=True):
        return client.post(reverse("evaluation-run-start", args=[kb.slug]), data)


def test_the_page_lists_the_kbs_golden_sets_and_hides_the_kb_from_outsiders(imported_kb, alice_client, bob_client):
    page = alice_client.get(home(imported_kb))

    assert page.status_code == 200
    golden_set = imported_kb.golden_sets.get()
    assert golden_set.name in page.content.decode()
    assert reverse("evaluation-set-export", args=[imported_kb.slug, golden_set.pk]) in page.content.decode()
    assert bob_client.get(home(imported_kb)).status_code == 404


def test_a_retrieval_run_runs_in_the_background_and_stores_what_the_command_measures(
    imported_kb, alice_client, django_capture_on_commit_callbacks
):
    response = start(alice_client, imported_kb, django_capture_on_commit_callbacks, kind="bm25", agent="auto")

    assert response.status_code == 302
    run = EvaluationRun.objects.get()
    assert (run.status, run.progress, run.mode) == (RunStatus.DONE, 100, "bm25")
    expected = evaluate(imported_kb, load_questions(imported_kb), mode="bm25").report.metrics
    assert run.metrics == pytest.approx(expected)
    assert run.baseline["name"] == "rank-bm25"
    page = alice_client.get(home(imported_kb)).content.decode()
    assert f'id="run-{run.pk}"' in page and "ndcg@10" in page


def test_an_answer_run_asks_as_the_user_who_started_it_and_links_failures_to_traces(
    imported_kb, alice, alice_client, django_capture_on_commit_callbacks
):
    start(alice_client, imported_kb, django_capture_on_commit_callbacks, kind="answers", agent="hybrid_agent")

    run = EvaluationRun.objects.get()
    assert run.status == RunStatus.DONE, run.error
    assert run.agent == "hybrid_agent" and run.requested_by == alice
    assert set(run.metrics) >= {"source_pass", "citation_valid"}
    detail = alice_client.get(reverse("evaluation-run", args=[imported_kb.slug, run.pk])).content.decode()
    failed = [qid for qid, outcome in run.per_question.items() if outcome["why"]]
    for qid in failed:
        assert f"/traces/{run.per_question[qid]['trace_id']}/" in detail
    assert "source_pass" in detail


def test_a_run_that_cannot_run_fails_with_its_reason_instead_of_staying_queued(imported_kb):
    run = queue_run(imported_kb, RunRequest(None, "answers"), None, dispatch_run=lambda pk: None)

    execute_run(run.pk)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "no longer exists" in run.error


def test_a_taken_run_is_not_run_twice(imported_kb, alice):
    run = queue_run(imported_kb, RunRequest(None, "bm25"), alice, dispatch_run=lambda pk: None)
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)

    execute_run(run.pk)

    run.refresh_from_db()
    assert (run.status, run.metrics) == (RunStatus.RUNNING, {})


def test_a_running_row_polls_for_its_progress_and_a_finished_one_stops(imported_kb, alice, alice_client):
    run = queue_run(imported_kb, RunRequest(None, "bm25"), alice, dispatch_run=lambda pk: None)
    url = reverse("evaluation-run", args=[imported_kb.slug, run.pk])

    queued = alice_client.get(url, headers={"HX-Request": "true"}).content.decode()
    execute_run(run.pk)
    done = alice_client.get(url, headers={"HX-Request": "true"}).content.decode()

    assert 'hx-trigger="every 1s"' in queued and "0%" in queued
    assert "hx-trigger" not in done and "ndcg@10" in done


def test_runs_side_by_side_show_their_metrics_and_only_the_settings_that_differ(
    imported_kb, alice_client, django_capture_on_commit_callbacks
):
    start(alice_client, imported_kb, django_capture_on_commit_callbacks, kind="bm25", agent="auto")
    start(alice_client, imported_kb, django_capture_on_commit_callbacks, kind="vector", agent="auto")
    first, second = EvaluationRun.objects.order_by("pk")

    page = alice_client.get(home(imported_kb), {"compare": [first.pk, second.pk]}).content.decode()

    assert "Side by side" in page and "Configuration differences" in page
    diff = page[page.index("data-config-diff"):]
    assert "<code>mode</code>" in diff and "<code>k1</code>" not in diff


def test_a_written_question_is_added_edited_and_deleted(kb, alice_client):
    from chat.tests.conftest import ingest_docs

    ingest_docs(kb)
    document = kb.documents.first()
    golden_set = GoldenSet.objects.create(kb=kb, name="mine")
    url = reverse("evaluation-set", args=[kb.slug, golden_set.pk])

    added = alice_client.post(url, {"qid": "q1", "text": "How does hybrid search fuse?", "category": "retrieval",
                                    "keywords": "RRF\nsixty | 60", "expected_shortcut": "", "relevant": [document.pk]})
    question = GoldenQuestion.objects.get()
    edit = reverse("evaluation-question", args=[kb.slug, golden_set.pk, question.pk])
    alice_client.post(edit, {"qid": "q1", "text": "How is hybrid fused?", "keywords": "RRF", "expected_shortcut": "",
                             "relevant": [document.pk]})
    question.refresh_from_db()

    assert added.status_code == 302
    assert question.text == "How is hybrid fused?" and question.expected_keywords == ["RRF"]
    assert list(question.qrels.values_list("document_id", flat=True)) == [document.pk]
    alice_client.post(reverse("evaluation-question-delete", args=[kb.slug, golden_set.pk, question.pk]))
    assert not GoldenQuestion.objects.exists()


def test_a_question_with_no_source_and_no_shortcut_is_refused_with_a_reason(kb, alice_client):
    golden_set = GoldenSet.objects.create(kb=kb, name="mine")

    response = alice_client.post(reverse("evaluation-set", args=[kb.slug, golden_set.pk]),
                                 {"qid": "q1", "text": "Anything?", "keywords": "", "expected_shortcut": ""})

    assert response.status_code == 400
    assert "Choose the documents that answer it" in response.content.decode()
    assert not GoldenQuestion.objects.exists()


def test_an_exported_set_imports_back_as_the_same_questions(imported_kb, alice_client):
    golden_set = imported_kb.golden_sets.get()
    exported = json.loads(alice_client.get(reverse("evaluation-set-export", args=[imported_kb.slug, golden_set.pk])).content)
    exported["name"] = "copy"
    upload = SimpleUploadedFile("copy.json", json.dumps(exported).encode(), content_type="application/json")

    response = alice_client.post(reverse("evaluation-set-import", args=[imported_kb.slug]), {"file": upload, "format": "golden"})

    copy = imported_kb.golden_sets.get(name="copy")
    assert response.status_code == 302

    def shape(s):
        return sorted((q.qid, q.text, tuple(sorted((r.document_id, r.relevance) for r in q.qrels.all()))) for q in s.questions.all())

    assert shape(copy) == shape(golden_set) and shape(copy)


def test_a_broken_import_says_what_is_wrong_and_creates_nothing(imported_kb, alice_client):
    upload = SimpleUploadedFile("broken.json", b"{not json", content_type="application/json")

    response = alice_client.post(reverse("evaluation-set-import", args=[imported_kb.slug]), {"file": upload, "format": "golden"})

    assert response.status_code == 400
    assert "broken.json: not a JSON file" in response.content.decode()
    assert imported_kb.golden_sets.count() == 1


def test_a_reader_sees_runs_but_cannot_start_one_or_change_a_set(imported_kb, bob_client, django_capture_on_commit_callbacks):
    imported_kb.visibility = "public"
    imported_kb.save()
    golden_set = imported_kb.golden_sets.get()

    assert bob_client.get(home(imported_kb)).status_code == 200
    assert start(bob_client, imported_kb, django_capture_on_commit_callbacks, kind="bm25").status_code == 403
    assert bob_client.post(reverse("evaluation-set-delete", args=[imported_kb.slug, golden_set.pk])).status_code == 403
    assert not EvaluationRun.objects.exists() and GoldenSet.objects.filter(pk=golden_set.pk).exists()


def test_the_category_chart_averages_the_main_metric_per_category():
    run = EvaluationRun(mode="answers", per_question={"a": {"keyword_pass": True}, "b": {"keyword_pass": False},
                                                     "c": {"keyword_pass": True}})
    questions = [GoldenQuestion(qid="a", category="zh"), GoldenQuestion(qid="b", category="zh"),
                 GoldenQuestion(qid="c", category="en")]

    chart = category_chart(run, questions)

    assert [(bar.label, bar.value, bar.count) for bar in chart.bars] == [("en", 1.0, 1), ("zh", 0.5, 2)]


def test_a_retrieval_run_and_an_answer_run_differ_only_where_their_settings_do(imported_kb, alice):
    from evaluation.pages import compare

    for mode in ("hybrid", "answers"):
        execute_run(queue_run(imported_kb, RunRequest(None, mode), alice, dispatch_run=lambda pk: None).pk)
    runs = list(EvaluationRun.objects.order_by("pk"))

    _, config = compare(runs)

    names = {row.name for row in config}
    assert "mode" in names and "generator" in names
    assert not any(name.startswith("retrieval.fusion") for name in names), names


def _thumbs_down(user, kb, question: str):
    from chat.feedback import record_feedback
    from chat.models import Message
    from chat.pipeline import ChatOptions, ChatRequest, run_chat

    result = run_chat(ChatRequest(user, None, question, ChatOptions(kb_slug=kb.slug)), emit=lambda event: None)
    return record_feedback(user, Message.objects.get(pk=result.message_id), is_positive=False, comment="wrong")


def test_a_thumbs_down_answer_becomes_a_drafted_golden_question(imported_kb, alice, bob, alice_client):
    imported_kb.visibility = "public"
    imported_kb.save()
    mine = _thumbs_down(alice, imported_kb, "heat conduction in composite slabs")
    _thumbs_down(bob, imported_kb, "bob's private question about shells")
    golden_set = imported_kb.golden_sets.get()

    page = alice_client.get(home(imported_kb)).content.decode()
    draft = alice_client.get(reverse("evaluation-feedback", args=[imported_kb.slug]),
                             {"feedback": mine.pk, "set": golden_set.pk}, follow=True)
    form = draft.context["form"]

    assert "heat conduction in composite slabs" in page and "bob&#x27;s private question" not in page
    assert form.initial["qid"] == f"feedback-{mine.pk}" and form.initial["text"] == "heat conduction in composite slabs"
    assert form.initial["relevant"], "the answer's cited documents are the first guess at its sources"
    alice_client.post(reverse("evaluation-set", args=[imported_kb.slug, golden_set.pk]),
                      {"qid": form.initial["qid"], "text": form.initial["text"], "keywords": "",
                       "expected_shortcut": "", "relevant": form.initial["relevant"]})
    assert GoldenQuestion.objects.filter(qid=f"feedback-{mine.pk}", golden_set=golden_set).exists()
    assert "data-candidates" not in alice_client.get(home(imported_kb)).content.decode()  # taken, so no longer offered


def _beir_zip(files: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


BEIR = {
    "tiny/corpus.jsonl": b'{"_id": "d1", "title": "Pumps", "text": "Pump seals are checked weekly."}\n'
    b'{"_id": "d2", "title": "Valves", "text": "Valves are greased every month."}\n',
    "tiny/queries.jsonl": b'{"_id": "q1", "text": "How often are pump seals checked?"}\n'
    b'{"_id": "q2", "text": "When are valves greased?"}\n',
    "tiny/qrels/test.tsv": b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n",
}


def test_a_zipped_beir_folder_imports_its_passages_and_questions(kb, alice_client):
    upload = SimpleUploadedFile("tiny.zip", _beir_zip(BEIR), content_type="application/zip")

    response = alice_client.post(reverse("evaluation-set-import", args=[kb.slug]), {"file": upload, "format": "beir"})

    assert response.status_code == 302
    golden_set = kb.golden_sets.get(name="tiny")
    relevant = {q.qid: [r.document.name for r in q.qrels.all()] for q in golden_set.questions.all()}
    assert relevant == {"q1": ["d1.txt"], "q2": ["d2.txt"]}
    assert sorted(kb.documents.values_list("name", flat=True)) == ["d1.txt", "d2.txt"]


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({k: v for k, v in BEIR.items() if "qrels" not in k}, "the zip needs exactly one qrels/test.tsv (found none)"),
        ({**BEIR, "other/corpus.jsonl": b""}, "the zip needs exactly one corpus.jsonl"),
    ],
)
def test_a_zip_without_one_of_each_beir_file_is_refused_by_name(kb, alice_client, files, error):
    upload = SimpleUploadedFile("bad.zip", _beir_zip(files), content_type="application/zip")

    response = alice_client.post(reverse("evaluation-set-import", args=[kb.slug]), {"file": upload, "format": "beir"})

    assert response.status_code == 400 and error in response.content.decode()
    assert not kb.golden_sets.exists() and not kb.documents.exists()


def test_a_zip_bomb_is_refused_before_it_fills_the_disk(kb, alice_client, settings):
    settings.MAX_UPLOAD_BYTES = 1_000_000
    bomb = {**BEIR, "tiny/corpus.jsonl": b" " * 50_000_000}  # 50 MB of spaces deflate to ~50 kB
    data = _beir_zip(bomb)
    assert len(data) < 200_000
    upload = SimpleUploadedFile("bomb.zip", data, content_type="application/zip")

    response = alice_client.post(reverse("evaluation-set-import", args=[kb.slug]), {"file": upload, "format": "beir"})

    assert response.status_code == 400
    assert "more than the 1,000,000 allowed" in response.content.decode()
    assert not kb.golden_sets.exists()


def test_a_file_that_is_not_a_zip_is_said_to_be_none(kb, alice_client):
    upload = SimpleUploadedFile("corpus.jsonl", BEIR["tiny/corpus.jsonl"], content_type="application/json")

    response = alice_client.post(reverse("evaluation-set-import", args=[kb.slug]), {"file": upload, "format": "beir"})

    assert response.status_code == 400 and "corpus.jsonl: not a zip file" in response.content.decode()
