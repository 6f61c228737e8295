"""Tiny BEIR and SQuAD data sets written to tmp_path, and a KB imported from one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

CORPUS = [
    {"_id": "d1", "title": "Wing in a slipstream", "text": "The lift of a wing in a propeller slipstream was measured."},
    {"_id": "d2", "title": "Heat conduction", "text": "Heat conduction in composite slabs with variable conductivity."},
    {"_id": "d3", "title": "Boundary layers", "text": "Laminar boundary layer transition on a flat plate at high speed."},
    {"_id": "d4", "title": "Shock waves", "text": "Shock wave interaction with a turbulent boundary layer in supersonic flow."},
    {"_id": "d5", "title": "Buckling", "text": "Buckling of thin cylindrical shells under axial compression."},
    {"_id": "d6", "title": "", "text": ""},
]
QUERIES = [
    {"_id": "q1", "text": "heat conduction in composite slabs"},
    {"_id": "q2", "text": "lift of a wing in a propeller slipstream"},
    {"_id": "q3", "text": "shock wave boundary layer interaction"},
    {"_id": "q4", "text": "buckling of cylindrical shells"},
    {"_id": "q5", "text": "laminar transition on a flat plate"},
    {"_id": "q6", "text": "a question nobody judged"},
    {"_id": "q7", "text": "a question about the empty passage"},
]
QRELS = [("q1", "d2", 2), ("q2", "d1", 1), ("q3", "d4", 2), ("q3", "d3", 1), ("q4", "d5", 1),
         ("q5", "d3", 2), ("q7", "d6", 1), ("q1", "missing", 1)]

SQUAD = {
    "version": "v1.0",
    "data": [
        {"id": "A1", "title": "Great Wall", "paragraphs": [
            {"id": "A1-1", "context": "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。", "qas": [
                {"id": "A1-Q1", "question": "长城东起哪里？", "answers": [{"text": "山海关", "answer_start": 14}]},
            ]},
            {"id": "A1-2", "context": "长城在1987年被列入世界遗产名录。", "qas": [
                {"id": "A1-Q2", "question": "长城哪一年列入世界遗产？", "answers": [{"text": "1987年", "answer_start": 3}]},
            ]},
        ]},
        {"id": "A2", "title": "Great Wall", "paragraphs": [
            {"id": "A2-1", "context": "熊猫主要生活在四川的竹林里，以竹子为食。", "qas": [
                {"id": "A2-Q1", "question": "熊猫吃什么？", "answers": [{"text": "竹子", "answer_start": 15}]},
                {"id": "A2-Q2", "question": "熊猫生活在哪里？", "answers": []},
            ]},
        ]},
        {"id": "A3", "title": "", "paragraphs": [
            {"id": "A3-1", "context": "黄河是中国第二长河，被称为母亲河。", "qas": [
                {"id": "A3-Q1", "question": "哪条河被称为母亲河？", "answers": [{"text": "黄河", "answer_start": 0}]},
            ]},
        ]},
    ],
}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def write_beir(folder: Path, corpus=CORPUS, queries=QUERIES, qrels=QRELS) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", corpus)
    write_jsonl(folder / "queries.jsonl", queries)
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def _hashing_embedder(settings):
    # The dependency-free embedder: fast, deterministic, no model to load.
    settings.EMBEDDER = "hashing-1024"


@pytest.fixture
def beir_dir(tmp_path) -> Path:
    return write_beir(tmp_path / "tiny-beir")


@pytest.fixture
def squad_file(tmp_path) -> Path:
    path = tmp_path / "tiny-squad.json"
    path.write_text(json.dumps(SQUAD, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def imported_kb(beir_dir, alice):
    from knowledge.models import KnowledgeBase

    call_command("import_dataset", str(beir_dir), "--format", "beir", "--kb", "tiny", "--owner", "alice")
    return KnowledgeBase.objects.get(slug="tiny")
