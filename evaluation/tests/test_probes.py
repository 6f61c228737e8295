from __future__ import annotations

import json

import pytest

from evaluation.datasets import read_beir
from evaluation.probes.fusion_probe import parse_fusions, variants
from evaluation.probes.squad_windows import relevant_windows, split_windows, write_beir

PARAGRAPH = "第一句话在这里。第二句话也在这里！第三句话？最后一句没有句号"


def test_it_cuts_a_paragraph_into_windows_of_whole_sentences_at_their_offsets():
    windows = split_windows(PARAGRAPH, "p1", "标题", chars=10)

    assert [w.text for w in windows] == ["第一句话在这里。", "第二句话也在这里！", "第三句话？", "最后一句没有句号"]
    assert all(PARAGRAPH[w.start : w.start + len(w.text)] == w.text for w in windows)
    assert [w.id for w in windows] == ["p1-1", "p1-2", "p1-3", "p1-4"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("第二句", ["p1-2"]), ("这里！第三", ["p1-2", "p1-3"]), ("第一", ["p1-1"])],
)
def test_a_question_is_relevant_to_every_window_its_answer_touches(answer, expected):
    windows = split_windows(PARAGRAPH, "p1", "标题", chars=10)

    assert relevant_windows(windows, PARAGRAPH.index(answer), answer) == expected


def test_it_writes_a_beir_folder_the_importer_reads(tmp_path):
    qas = [{"id": "q1", "question": "第三句是什么？", "answers": [{"text": "第三句话", "answer_start": PARAGRAPH.index("第三")}]}]
    squad = {"data": [{"id": "A", "title": "标题", "paragraphs": [{"context": PARAGRAPH, "qas": qas}]}]}
    source = tmp_path / "squad.json"
    source.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")

    assert write_beir(source, tmp_path / "beir", chars=10, paragraphs=None, titles=False) == (4, 1)

    dataset = read_beir(tmp_path / "beir")
    assert [q.relevant for q in dataset.questions] == [{"A-1-3": 1}]
    assert dataset.passages[2].text == "第三句话？"


def test_the_fusion_probe_tries_each_fusion_without_rerank_and_at_each_depth():
    rows = variants(parse_fusions("weighted:0.7,rrf:0.5"), (10, 20))

    hybrid = [row for row in rows if row.name.startswith("hybrid ") and "default" not in row.name]
    assert [(row.overrides["fusion"].mode, row.overrides["fusion"].bm25_weight) for row in hybrid] == (
        [("weighted", 0.3)] * 3 + [("rrf", 0.5)] * 3
    )
    assert [row.overrides.get("hybrid_rerank_depth") for row in hybrid] == [None, 10, 20] * 2
    assert [row.overrides["rerank"] for row in hybrid] == [False, True, True] * 2


def test_two_part_questions_join_questions_of_different_passages(tmp_path):
    from evaluation.probes.compound_questions import compound_set

    def qa(i, answer):
        return {"id": f"q{i}", "question": f"问题{i}？", "answers": [{"text": answer, "answer_start": 0}]}

    squad = {"data": [
        {"id": "A", "title": "甲", "paragraphs": [{"context": "甲的答案一。甲的答案二。", "qas": [qa(1, "答案一"), qa(2, "答案二")]}]},
        {"id": "B", "title": "乙", "paragraphs": [{"context": "乙的答案三。乙的答案四。", "qas": [qa(3, "答案三"), qa(4, "答案四")]}]},
    ]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    from evaluation.datasets import read_squad

    golden = compound_set(read_squad(path), pairs=10, name="two")

    assert [q["question"] for q in golden["questions"]] == ["问题1？问题3？", "问题2？问题4？"]
    assert golden["questions"][0]["relevant"] == {"甲-1.txt": 2, "乙-1.txt": 2}
    assert golden["questions"][0]["expected_keywords"] == ["答案一", "答案三"]


def test_the_community_probe_scores_each_method_on_the_same_graph():
    import networkx as nx

    from evaluation.probes.community_probe import compare

    graph = nx.Graph()
    graph.add_weighted_edges_from([(1, 2, 1.0), (2, 3, 1.0), (1, 3, 1.0), (4, 5, 1.0), (5, 6, 1.0), (4, 6, 1.0), (3, 4, 0.1)])

    rows = compare(graph)

    assert [row[0] for row in rows] == ["louvain", "greedy"]
    assert all(count == 2 and modularity > 0.4 for _, count, modularity, _ in rows)
