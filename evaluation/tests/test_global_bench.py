"""`manage.py bench global`: a tiny transcript corpus ingested, its graph built, both searches judged."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from evaluation.global_bench import AnswerUnderTest, Cited, Scope, judge, read_corpus, source_of
from graphrag.build import build_graph
from graphrag.models import Community
from graphrag.tests.test_build import DOCS, ingest

pytestmark = pytest.mark.django_db

TRANSCRIPTS = {
    "input/EP-1_Behind_the_Tech_with_Ada-part1.txt": "EP-1_Behind_the_Tech_with_Ada.txt ../KEVIN SCOTT: Welcome. "
    + DOCS["pipeline.md"].replace("#", ""),
    "input/EP-1_Behind_the_Tech_with_Ada-part2.txt": DOCS["graph.md"].replace("#", ""),
    "input/EP-2_Behind_the_Tech_with_Bob-part1.txt": DOCS["ops.md"].replace("#", "")
    + " Celery workers retry failed tasks. Redis keeps the task queue in memory.",
}
QUESTIONS = "\ufeffquestion_text,question_id\nWhat do the services and tools in these episodes do?,q1\n" \
            "Which technologies store data?,q2\nWhat themes recur?,q3\n"


@pytest.fixture
def data_dir(tmp_path) -> Path:
    with zipfile.ZipFile(tmp_path / "Kevin_Scott_Podcast_Transcripts_Input_Text.zip", "w") as archive:
        archive.writestr("input/", "")
        for name, text in TRANSCRIPTS.items():
            archive.writestr(name, text)
    (tmp_path / "Kevin_Scott_Questions.csv").write_text(QUESTIONS, encoding="utf-8")
    return tmp_path


def test_it_reads_the_first_transcripts_with_all_their_parts_and_the_questions(data_dir):
    corpus = read_corpus(data_dir, "podcast", transcripts=1, questions=2)

    assert [name for name, _ in corpus.documents] == [
        "EP-1_Behind_the_Tech_with_Ada-part1.txt", "EP-1_Behind_the_Tech_with_Ada-part2.txt"]
    assert corpus.questions == ["What do the services and tools in these episodes do?", "Which technologies store data?"]
    assert source_of("EP-1_Behind_the_Tech_with_Ada-part12.txt") == "EP-1_Behind_the_Tech_with_Ada"


def test_the_bench_ingests_builds_and_prints_former_and_map_reduce_side_by_side(data_dir):
    out = io.StringIO()

    call_command("bench", "global", "--data", str(data_dir), "--json", stdout=out, stderr=io.StringIO())

    report = json.loads(out.getvalue())
    assert report["questions"] == 3 and report["top_level_communities"] >= 1
    assert report["map_reduce (map/reduce)"] == "extractive/listed"
    for metric in ("key_points", "communities_cited", "sources_cited", "community_coverage", "citations_valid"):
        assert set(report[metric]) == {"former", "former_same_reports", "map_reduce"}
    assert report["citations_valid"]["map_reduce"] == 1.0
    assert report["key_points"]["map_reduce"] > 0
    assert all(tokens <= report["budget_tokens"] for tokens in report["tokens"].values())

    again = io.StringIO()
    call_command("bench", "global", "--data", str(data_dir), "--json", stdout=again, stderr=(log := io.StringIO()))
    assert "ingested 0 of 3 documents" in log.getvalue()  # the KB is reused
    assert json.loads(again.getvalue())["key_points"] == report["key_points"]


def test_a_missing_corpus_is_a_command_error(tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="cannot read the podcast corpus"):
        call_command("bench", "global", "--data", str(tmp_path), stdout=io.StringIO(), stderr=io.StringIO())


def test_the_rubric_counts_grounded_on_question_new_points_only(kb):
    stated = "Celery uses Redis as its message broker for background workers and retries"
    ingest(kb, {"ops.md": f"# 1 Ops\n\nDocker runs Redis and Celery. {stated}."})
    build_graph(kb)
    community = Community.objects.filter(kb=kb, level=0).first()
    chunk_id = community.chunk_ids[0]
    answer = AnswerUnderTest(
        "\n".join([
            f"- {stated}. [1]",  # grounded, on the question
            f"- {stated}, indeed. [1]",  # the same point again
            "- Kubernetes schedules containers across many machines in clusters. [1]",  # not in the chunk
            f"- {stated}. [9]",  # a marker of nothing: ungrounded
        ]),
        {1: Cited(community.pk, (chunk_id,))},
        ms=1.0,
    )

    figures = judge("What does Celery use as a broker?", answer, Scope.of(kb))

    assert figures["key_points"] == 1
    assert figures["communities_cited"] == 1 and figures["documents_cited"] == 1
    assert figures["citations_valid"] == 1.0
    assert figures["community_coverage"] == 1 / Community.objects.filter(kb=kb, level=0).count()
