"""bench pages reports every ready document's page views, with the memory they allocate."""

from __future__ import annotations

import pytest

from chat.tests.web_factories import ingest
from evaluation.page_bench import bench_pages


def test_it_times_each_ready_documents_text_and_chunks(kb, alice, django_capture_on_commit_callbacks):
    for name in ("a.md", "b.md"):
        with django_capture_on_commit_callbacks(execute=True):
            ingest(kb, alice, name, f"# {name}\n\nSome text about {name}.\n".encode())

    report = bench_pages(kb, alice, runs=2)

    assert report["documents"] == 2
    assert [(row["document"], row["view"]) for row in report["pages"]] == [
        ("a.md", "text"), ("a.md", "chunks"), ("b.md", "text"), ("b.md", "chunks")
    ]
    assert all(row["p95_ms"] >= row["p50_ms"] > 0 and row["peak_alloc_kb"] > 0 for row in report["pages"])
    assert report["worst_memory_ratio_64kb_plus"] is None  # no document that large


def test_it_refuses_a_page_that_does_not_answer(kb, alice, bob, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ingest(kb, alice, "a.md", b"# A\n\ntext\n")

    with pytest.raises(RuntimeError, match="answered 404"):
        bench_pages(kb, bob, runs=1)  # bob may not read alice's KB
