from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase

from .factories import GUIDE_MD, encrypted_pdf

pytestmark = pytest.mark.django_db


def _ingest_json(capsys, *args) -> tuple[dict, int]:
    code = 0
    try:
        call_command("ingest", *args, "--json")
    except SystemExit as exit_:
        code = exit_.code
    return json.loads(capsys.readouterr().out), code


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "guide.md").write_text(GUIDE_MD, encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("第一章 总则\n\n施工前应完成技术交底。", encoding="gb18030")
    (tmp_path / ".hidden.md").write_text("# secret", encoding="utf-8")
    return tmp_path


def test_it_ingests_a_folder_recursively_and_reports_json(capsys, kb, folder):
    report, code = _ingest_json(capsys, str(folder), "--kb", kb.slug, "--recursive")

    assert code == 0
    assert sorted(report["ingested"]) == sorted([str(folder / "guide.md"), str(folder / "sub" / "notes.txt")])
    assert report["unchanged"] == [] and report["failed"] == []
    assert set(Document.objects.values_list("name", flat=True)) == {"guide.md", "sub/notes.txt"}
    assert Document.objects.filter(status=DocumentStatus.READY).count() == 2


def test_it_reports_unchanged_files_on_a_second_run(capsys, kb, folder):
    _ingest_json(capsys, str(folder), "--kb", kb.slug)
    chunks = Chunk.objects.count()

    report, code = _ingest_json(capsys, str(folder), "--kb", kb.slug)

    assert code == 0 and report["unchanged"] == [str(folder / "guide.md")]
    assert Chunk.objects.count() == chunks


def test_it_fails_bad_files_alone_and_exits_1(capsys, kb, tmp_path, settings):
    settings.MAX_UPLOAD_BYTES, settings.MAX_UPLOAD_MB = 2000, 0
    files = {
        "good.md": GUIDE_MD.encode(),
        "empty.txt": b"",
        "corrupt.pdf": b"%PDF-1.7\n%%garbage",
        "locked.pdf": encrypted_pdf(),
        "fake.docx": b"not a zip",
        "blob.txt": b"\x00\xff\x00\xfe" * 200,
        "huge.md": b"# big\n\n" + b"word " * 1000,
        "tool.exe": b"MZ",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name in files] + [str(tmp_path / "missing.md")]

    report, code = _ingest_json(capsys, *paths, "--kb", kb.slug)

    assert code == 1
    assert report["ingested"] == [str(tmp_path / "good.md")]
    errors = {item["path"].rsplit("/", 1)[-1]: item["error"] for item in report["failed"]}
    assert "empty" in errors["empty.txt"]
    assert "pdf" in errors["corrupt.pdf"].lower()
    assert "password" in errors["locked.pdf"].lower()
    assert "zip" in errors["fake.docx"]
    assert "binary" in errors["blob.txt"]
    assert "limit" in errors["huge.md"]
    assert "unsupported file type '.exe'" in errors["tool.exe"]
    assert "no such file" in errors["missing.md"]
    assert Document.objects.get(name="good.md").status == DocumentStatus.READY
    assert not Document.objects.filter(name__in=["empty.txt", "huge.md", "tool.exe", "missing.md"]).exists()


def test_it_refuses_an_unknown_kb_without_create(tmp_path, alice):
    (tmp_path / "a.md").write_text("# A\n\ntext", encoding="utf-8")

    with pytest.raises(CommandError, match="does not exist.*--create"):
        call_command("ingest", str(tmp_path / "a.md"), "--kb", "nope")
    assert not KnowledgeBase.objects.exists() and not Document.objects.exists()


def test_it_creates_the_kb_with_create(capsys, tmp_path, alice):
    (tmp_path / "a.md").write_text("# A\n\nSome text about retrieval.", encoding="utf-8")

    report, code = _ingest_json(capsys, str(tmp_path / "a.md"), "--kb", "new-kb", "--create", "--owner", "alice")

    assert code == 0 and len(report["ingested"]) == 1
    assert KnowledgeBase.objects.get(slug="new-kb").owner == alice


def test_it_prints_a_summary_without_json(capsys, kb, folder):
    call_command("ingest", str(folder), "--kb", kb.slug, "--recursive")

    assert "ingested 2, unchanged 0, failed 0" in capsys.readouterr().out


def test_setup_demo_creates_the_user_and_ingests_docs(capsys, settings, tmp_path):
    corpus = tmp_path / "evaluation" / "corpus" / "docs"
    corpus.mkdir(parents=True)
    (corpus / "intro.md").write_text("# 1 Intro\n\nAbout the project.", encoding="utf-8")
    (tmp_path / "docs").mkdir()  # the live docs: not what the demo KB holds
    (tmp_path / "docs" / "later.md").write_text("# Later\n\nEdited since the freeze.", encoding="utf-8")
    settings.BASE_DIR = tmp_path

    call_command("setup_demo")
    call_command("setup_demo")

    out = capsys.readouterr().out
    assert f"'{settings.DEMO_USERNAME}'" in out and settings.DEMO_PASSWORD in out
    assert "1 unchanged" in out
    kb = KnowledgeBase.objects.get(slug="docs")
    assert kb.documents.get().name == "intro.md" and kb.documents.get().status == DocumentStatus.READY
