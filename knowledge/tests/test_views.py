"""Web pages of the knowledge app: access rules, upload over HTMX, delete, re-ingest."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import InMemoryUploadedFile, SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase, Visibility

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}

MARKDOWN = b"""# Handbook

Intro paragraph about the handbook and why it exists.

## 1 Install

Run the installer. It copies files and writes the configuration.

## 2 Usage

Use the tool every day. See GB 50204-2015 for the concrete rules.
"""
CHINESE = (
    "第一章 总则\n\n"
    "混凝土结构工程施工质量验收应符合《混凝土结构工程施工质量验收规范》的规定。\n\n"
    "施工单位应建立质量管理体系。"
).encode()
HTML = (
    b"<html><body><h1>Guide</h1><p>First paragraph of the guide.</p>"
    b"<h2>Setup</h2><p>Set it up.</p></body></html>"
)


def upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data)


def post_files(client, kb, files, capture, **kwargs):
    # Ingestion is enqueued on commit; run it (inline in tests) as the request's commit would.
    with capture(execute=True):
        return client.post(reverse("knowledge-upload", args=[kb.slug]), {"files": files}, **kwargs)


@pytest.fixture
def document(kb, alice_client, django_capture_on_commit_callbacks):
    post_files(
        alice_client, kb, [upload("handbook.md", MARKDOWN)], django_capture_on_commit_callbacks
    )
    return Document.objects.get(kb=kb, name="handbook.md")


def kb_urls(kb: KnowledgeBase, document_pk: int = 1) -> dict[str, str]:
    return {
        "detail": reverse("knowledge-detail", args=[kb.slug]),
        "settings": reverse("knowledge-settings", args=[kb.slug]),
        "upload": reverse("knowledge-upload", args=[kb.slug]),
        "document": reverse("document-detail", args=[kb.slug, document_pk]),
        "delete": reverse("document-delete", args=[kb.slug, document_pk]),
        "reingest": reverse("document-reingest", args=[kb.slug, document_pk]),
        "restore": reverse("document-restore", args=[kb.slug, document_pk, 1]),
    }


# --- access -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(
    "name", ["list", "create", "detail", "settings", "upload", "document", "delete", "reingest", "restore"]
)
def test_it_requires_login(client, kb, method, name):
    urls = {"list": reverse("knowledge-list"), "create": reverse("knowledge-create"), **kb_urls(kb)}
    response = getattr(client, method)(urls[name])
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("list", "post"),
        ("create", "put"),
        ("detail", "post"),
        ("settings", "delete"),
        ("upload", "get"),
        ("document", "post"),
        ("delete", "put"),
        ("reingest", "get"),
        ("restore", "get"),
    ],
)
def test_it_rejects_wrong_method(alice_client, document, name, method):
    urls = {
        "list": reverse("knowledge-list"),
        "create": reverse("knowledge-create"),
        **kb_urls(document.kb, document.pk),
    }
    assert getattr(alice_client, method)(urls[name]).status_code == 405
    assert Document.objects.filter(pk=document.pk, version=1).exists()


@pytest.mark.parametrize("name", ["detail", "settings", "document", "delete"])
def test_it_hides_other_users_kbs_on_get(bob_client, document, name):
    assert bob_client.get(kb_urls(document.kb, document.pk)[name]).status_code == 404


@pytest.mark.parametrize("name", ["settings", "upload", "delete", "reingest", "restore"])
def test_it_hides_other_users_kbs_on_post(
    bob_client, document, name, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = bob_client.post(
            kb_urls(document.kb, document.pk)[name],
            {"name": "taken", "visibility": "public", "files": [upload("x.md", b"# x")]},
        )
    assert response.status_code == 404
    document.refresh_from_db()
    assert (document.kb.name, document.kb.visibility, document.version) == (
        "Alice's KB",
        "private",
        1,
    )
    assert Document.objects.count() == 1


def test_it_hides_documents_of_another_kb(alice_client, bob, document):
    bobs_kb = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's", owner=bob)
    bobs_kb.members.add(document.kb.owner)  # membership of a private KB grants nothing
    url = reverse("document-detail", args=[bobs_kb.slug, document.pk])
    assert alice_client.get(url).status_code == 404
    url = reverse("document-detail", args=[document.kb.slug, document.pk + 1000])
    assert alice_client.get(url).status_code == 404


# --- list, create, settings ---------------------------------------------------------------


def test_it_lists_readable_kbs_with_counts(alice_client, bob, document):
    KnowledgeBase.objects.create(slug="bob-private", name="Bob private", owner=bob)
    public = KnowledgeBase.objects.create(
        slug="bob-public", name="Bob public", owner=bob, visibility=Visibility.PUBLIC
    )
    public.members.add(bob)  # a members join must not inflate the counts
    response = alice_client.get(reverse("knowledge-list"))
    assert response.status_code == 200
    kbs = {kb.slug: kb for kb in response.context["kbs"]}
    assert set(kbs) == {"alice-kb", "bob-public"}
    assert kbs["alice-kb"].document_count == 1
    assert kbs["alice-kb"].ready_count == 1
    assert kbs["alice-kb"].chunk_count == document.chunk_count > 0
    assert b"Bob private" not in response.content


def test_it_creates_a_kb_owned_by_the_user(alice_client, alice):
    data = {"name": "Specs", "slug": "specs", "description": "", "visibility": "private"}
    response = alice_client.post(reverse("knowledge-create"), data)
    kb = KnowledgeBase.objects.get(slug="specs")
    assert response.status_code == 302
    assert response.url == reverse("knowledge-detail", args=["specs"])
    assert kb.owner == alice


@pytest.mark.parametrize(
    ("slug", "error"),
    [
        ("Specs", "lower-case"),
        ("has space", "valid"),
        ("new", "reserved"),
        ("alice-kb", "choose another name"),
        ("", "required"),
    ],
)
def test_it_validates_the_slug(alice_client, kb, slug, error):
    data = {"name": "Specs", "slug": slug, "visibility": "private"}
    response = alice_client.post(reverse("knowledge-create"), data)
    assert response.status_code == 200
    assert error in " ".join(response.context["form"].errors["slug"])
    assert KnowledgeBase.objects.count() == 1


def test_it_saves_settings_and_members(alice_client, kb, bob):
    data = {
        "name": "Renamed",
        "description": "d",
        "visibility": "shared",
        "member_usernames": "bob, alice",
        "answer_mode": "auto",
    }
    response = alice_client.post(reverse("knowledge-settings", args=[kb.slug]), data)
    assert response.status_code == 302
    kb.refresh_from_db()
    assert (kb.name, kb.visibility) == ("Renamed", "shared")
    assert list(kb.members.all()) == [bob]  # the owner is not listed as a member
    page = alice_client.get(reverse("knowledge-settings", args=[kb.slug]))
    assert page.context["form"].initial["member_usernames"] == "bob"


def test_it_rejects_unknown_member_usernames(alice_client, kb):
    data = {"name": "Renamed", "visibility": "shared", "member_usernames": "nobody"}
    response = alice_client.post(reverse("knowledge-settings", args=[kb.slug]), data)
    assert response.status_code == 200
    assert "No such user: nobody." in response.content.decode()
    kb.refresh_from_db()
    assert kb.name == "Alice's KB"


def test_it_lets_only_the_owner_change_settings(bob_client, kb, bob):
    kb.visibility = Visibility.SHARED
    kb.save()
    kb.members.add(bob)
    url = reverse("knowledge-settings", args=[kb.slug])
    assert bob_client.get(url).status_code == 403
    assert bob_client.post(url, {"name": "Bob's now", "visibility": "public"}).status_code == 403
    kb.refresh_from_db()
    assert kb.name == "Alice's KB"


# --- members and visibility ---------------------------------------------------------------


def test_it_lets_members_of_a_shared_kb_read_and_upload(
    bob_client, kb, bob, django_capture_on_commit_callbacks
):
    kb.visibility = Visibility.SHARED
    kb.save()
    kb.members.add(bob)
    assert bob_client.get(kb.get_absolute_url()).status_code == 200
    response = post_files(
        bob_client, kb, [upload("bob.md", MARKDOWN)], django_capture_on_commit_callbacks
    )
    assert response.status_code == 200
    assert Document.objects.get(kb=kb, name="bob.md").uploaded_by == bob


def test_it_hides_a_private_kb_from_its_members(bob_client, kb, bob):
    kb.members.add(bob)
    assert bob_client.get(kb.get_absolute_url()).status_code == 404


def test_it_lets_everyone_read_a_public_kb_but_not_write(bob_client, document):
    kb = document.kb
    kb.visibility = Visibility.PUBLIC
    kb.save()
    page = bob_client.get(kb.get_absolute_url())
    assert page.status_code == 200
    assert b"data-dropzone" not in page.content
    assert bob_client.get(document.get_absolute_url()).status_code == 200
    urls = kb_urls(kb, document.pk)
    assert bob_client.post(urls["upload"], {"files": [upload("x.md", b"# x")]}).status_code == 403
    assert bob_client.post(urls["delete"]).status_code == 403
    assert bob_client.post(urls["reingest"]).status_code == 403
    assert Document.objects.filter(kb=kb).count() == 1


# --- KB page and upload -------------------------------------------------------------------


def test_it_shows_the_kb_page_with_upload_and_websocket(alice_client, document):
    response = alice_client.get(document.kb.get_absolute_url())
    html = response.content.decode()
    assert response.status_code == 200
    assert 'ws-connect="/ws/kb/alice-kb/"' in html
    assert 'hx-encoding="multipart/form-data"' in html
    assert 'type="file" name="files" multiple' in html
    assert f'id="document-{document.pk}"' in html
    assert 'data-status="ready"' in html
    assert 'hx-trigger="every' not in html  # progress comes over the socket, never by polling


def test_it_uploads_several_files_over_htmx(
    alice_client, kb, alice, django_capture_on_commit_callbacks
):
    files = [
        upload("handbook.md", MARKDOWN),
        upload("总则.txt", CHINESE),
        upload("guide.html", HTML),
    ]
    response = post_files(alice_client, kb, files, django_capture_on_commit_callbacks, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html  # a fragment, not a page
    assert html.count("outcome-queued") == 3
    assert '<tbody id="document-rows" hx-swap-oob="true">' in html
    assert 'id="kb-counts" hx-swap-oob="true"' in html
    documents = Document.objects.filter(kb=kb)
    assert sorted(d.name for d in documents) == ["guide.html", "handbook.md", "总则.txt"]
    assert {d.status for d in documents} == {DocumentStatus.READY}
    assert all(d.chunk_count > 0 and d.char_count > 0 for d in documents)
    assert all(d.uploaded_by == alice for d in documents)
    assert Chunk.objects.live().children().filter(kb=kb).count() == sum(
        d.chunk_count for d in documents
    )


def test_it_reports_the_same_bytes_as_unchanged(
    alice_client, document, django_capture_on_commit_callbacks
):
    response = post_files(
        alice_client,
        document.kb,
        [upload("handbook.md", MARKDOWN)],
        django_capture_on_commit_callbacks,
        headers=HTMX,
    )
    assert "outcome-unchanged" in response.content.decode()
    chunk_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    document.refresh_from_db()
    assert (document.version, Document.objects.count()) == (1, 1)
    assert set(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == chunk_ids


def test_it_makes_a_new_version_of_changed_content(
    alice_client, document, django_capture_on_commit_callbacks
):
    changed = MARKDOWN + b"\n## 3 More\n\nAnother section appears in the second version.\n"
    response = post_files(
        alice_client,
        document.kb,
        [upload("handbook.md", changed)],
        django_capture_on_commit_callbacks,
        headers=HTMX,
    )
    assert "queued as version 2" in response.content.decode()
    document.refresh_from_db()
    assert (document.version, document.live_version, document.status) == (
        2,
        2,
        DocumentStatus.READY,
    )
    assert set(Chunk.objects.filter(document=document).values_list("version", flat=True)) == {2}


def test_it_rejects_an_unsupported_extension(
    alice_client, document, django_capture_on_commit_callbacks
):
    files = [
        upload("setup.exe", b"MZ\x90\x00binary"),
        upload("notes.md", b"# Notes\n\nSome notes here."),
    ]
    response = post_files(
        alice_client, document.kb, files, django_capture_on_commit_callbacks, headers=HTMX
    )
    html = response.content.decode()
    assert "outcome-rejected" in html
    assert "unsupported file type &#x27;.exe&#x27;" in html
    assert "outcome-queued" in html  # the batch goes on
    assert sorted(Document.objects.values_list("name", flat=True)) == ["handbook.md", "notes.md"]


def test_it_rejects_an_oversize_file_before_reading_it(
    alice_client, document, settings, django_capture_on_commit_callbacks, monkeypatch
):
    settings.MAX_UPLOAD_BYTES = 10
    read_names = []
    monkeypatch.setattr(
        "django.core.files.uploadedfile.InMemoryUploadedFile.read",
        # The test client reads its SimpleUploadedFile to encode the request: not counted.
        lambda self, *args: (
            (type(self) is InMemoryUploadedFile and read_names.append(self.name))
            or self.file.read(*args)
        ),
        raising=False,
    )
    files = [upload("big.md", b"# Big\n\n" + b"x" * 100)]
    response = post_files(
        alice_client, document.kb, files, django_capture_on_commit_callbacks, headers=HTMX
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "outcome-rejected" in html and "big.md" in html and "limit" in html
    assert read_names == []
    assert list(Document.objects.values_list("name", "version")) == [("handbook.md", 1)]


def test_it_turns_too_many_files_into_a_message(
    alice_client, kb, settings, django_capture_on_commit_callbacks
):
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 2
    files = [upload(f"n{i}.md", f"# Note {i}\n\nText {i}.".encode()) for i in range(3)]
    response = post_files(alice_client, kb, files, django_capture_on_commit_callbacks, headers=HTMX)
    assert response.status_code == 200
    assert "Too many files in one upload: at most 2 at a time" in response.content.decode()
    assert not Document.objects.exists()


def test_it_asks_for_a_file_when_none_is_chosen(alice_client, kb):
    response = alice_client.post(reverse("knowledge-upload", args=[kb.slug]), {}, headers=HTMX)
    assert response.status_code == 200
    assert "Choose at least one file." in response.content.decode()


def test_it_still_checks_csrf_on_upload(alice, kb):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    url = reverse("knowledge-upload", args=[kb.slug])
    assert client.post(url, {"files": [upload("a.md", b"# A")]}, headers=HTMX).status_code == 403
    client.get(kb.get_absolute_url())
    token = client.cookies["csrftoken"].value
    headers = {**HTMX, "X-CSRFToken": token}
    assert client.post(url, {"files": [upload("a.md", b"# A")]}, headers=headers).status_code == 200
    assert Document.objects.filter(name="a.md").exists()


def test_it_renders_the_whole_page_after_an_upload_without_htmx(
    alice_client, kb, django_capture_on_commit_callbacks
):
    response = post_files(
        alice_client, kb, [upload("handbook.md", MARKDOWN)], django_capture_on_commit_callbacks
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" in html and "outcome-queued" in html and "handbook.md" in html


def test_it_shows_a_failed_document_with_its_error(
    alice_client, kb, django_capture_on_commit_callbacks
):
    files = [upload("binary.txt", bytes(range(256)) * 8)]
    post_files(alice_client, kb, files, django_capture_on_commit_callbacks, headers=HTMX)
    document = Document.objects.get(name="binary.txt")
    assert document.status == DocumentStatus.FAILED and document.error
    html = alice_client.get(kb.get_absolute_url()).content.decode()
    assert 'data-status="failed"' in html
    retry = reverse("document-reingest", args=[kb.slug, document.pk])
    assert f'hx-post="{retry}"' in html and f'aria-label="Retry {document.name}"' in html


def test_only_a_failed_row_offers_a_retry(alice_client, document):
    html = alice_client.get(document.kb.get_absolute_url()).content.decode()

    assert document.status == DocumentStatus.READY and "Retry" not in html


# --- document page, delete, re-ingest -----------------------------------------------------


def test_it_shows_the_document_as_text_with_each_passage_addressable(alice_client, document):
    response = alice_client.get(document.get_absolute_url())
    html = response.content.decode()

    assert response.status_code == 200
    assert "<h2>" in html and "Install</h2>" in html and "Usage</h2>" in html  # headings as headings
    assert "Run the installer. It copies files and writes the configuration." in html
    for child in Chunk.objects.live().filter(document=document, level=Chunk.CHILD):
        assert f'class="passage" id="chunk-{child.pk}"' in html  # where a citation lands


def test_a_long_document_is_shown_a_page_at_a_time_and_a_citation_opens_its_page(alice_client, document, settings):
    settings.DOCUMENT_PAGE_CHARS = 1  # one parent a page
    parents = list(Chunk.objects.live().parents().filter(document=document).order_by("index"))
    last_child = parents[-1].children.order_by("index").last()
    assert len(parents) >= 2

    first = alice_client.get(document.get_absolute_url())
    cited = alice_client.get(document.get_absolute_url(), {"chunk": last_child.pk})
    beyond = alice_client.get(document.get_absolute_url(), {"page": 10**9})

    html = first.content.decode()
    assert first.context["page"].number == 1 and first.context["page"].count == len(parents)
    assert f'id="chunk-{parents[0].pk}"' in html and f'id="chunk-{parents[-1].pk}"' not in html
    assert f'href="?page={len(parents)}#chunk-{parents[-1].pk}"' in html  # the outline still lists it
    assert "data-document-pager" in html
    assert cited.context["page"].number == len(parents)
    assert f'id="chunk-{last_child.pk}"' in cited.content.decode()
    assert beyond.context["page"].number == len(parents)


def test_a_citation_of_another_documents_chunk_opens_the_first_page(alice_client, document, kb):
    other = Chunk.objects.create(kb=kb, document=Document.objects.create(kb=kb, name="b.md", sha256="1" * 64, size=1),
                                 version=1, level=Chunk.PARENT, index=0, text="elsewhere", sha256="z")

    response = alice_client.get(document.get_absolute_url(), {"chunk": other.pk})

    assert response.status_code == 200 and response.context["page"].number == 1


def test_it_never_shows_where_the_file_was_on_the_server(alice_client, document):
    Document.objects.filter(pk=document.pk).update(source="/srv/private/uploads/handbook.md")

    for view in ("text", "chunks"):
        html = alice_client.get(document.get_absolute_url(), {"view": view}).content.decode()
        assert "/srv/private" not in html


def test_it_shows_sections_and_chunks(alice_client, document):
    response = alice_client.get(document.get_absolute_url(), {"view": "chunks"})
    html = response.content.decode()
    parents = list(response.context["parents"])
    assert response.status_code == 200
    assert len(parents) == document.parent_count > 0
    assert "Install" in html and "Usage" in html  # the outline
    child = parents[0].children.first()
    assert f'id="chunk-{parents[0].pk}"' in html and f'id="chunk-{child.pk}"' in html
    assert "GB 50204-2015" in html  # a tag


def test_it_confirms_before_deleting(alice_client, document):
    response = alice_client.get(reverse("document-delete", args=[document.kb.slug, document.pk]))
    assert response.status_code == 200
    assert "cannot be undone" in response.content.decode()
    assert Document.objects.filter(pk=document.pk).exists()


def test_it_deletes_a_document_and_its_chunks(alice_client, document):
    assert Chunk.objects.filter(document=document).exists()
    response = alice_client.post(reverse("document-delete", args=[document.kb.slug, document.pk]))
    assert response.status_code == 302
    assert response.url == document.kb.get_absolute_url()
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(kb=document.kb).exists()


def test_it_reingests_a_document(alice_client, document, django_capture_on_commit_callbacks):
    url = reverse("document-reingest", args=[document.kb.slug, document.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(url)
    assert response.status_code == 302
    document.refresh_from_db()
    assert (document.version, document.live_version, document.status) == (
        2,
        2,
        DocumentStatus.READY,
    )
    assert set(Chunk.objects.filter(document=document).values_list("version", flat=True)) == {2}


# --- versions -----------------------------------------------------------------------------


@pytest.fixture
def versioned(document, alice_client, django_capture_on_commit_callbacks):
    """The handbook at version 2, its version 1 kept."""
    changed = MARKDOWN + b"\n## 3 Support\n\nAsk the site office.\n"
    post_files(alice_client, document.kb, [upload("handbook.md", changed)], django_capture_on_commit_callbacks)
    document.refresh_from_db()
    assert document.version == document.live_version == 2
    return document


def restore_url(document: Document, version: int) -> str:
    return reverse("document-restore", args=[document.kb.slug, document.pk, version])


def test_it_restores_an_earlier_version(alice_client, versioned, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(restore_url(versioned, 1))

    assert response.status_code == 302 and response.url == versioned.get_absolute_url()
    versioned.refresh_from_db()
    assert (versioned.version, versioned.live_version) == (3, 3)
    assert bytes(versioned.file.data) == MARKDOWN
    assert versioned.versions.get(version=3).note == "restored from version 1"
    assert not Chunk.objects.live().filter(document=versioned, text__contains="site office").exists()
    page = alice_client.get(response.url).content.decode()
    assert "Restoring version 1 as version 3." in page
    job = versioned.jobs.get(version=3)
    assert job.reused_chunks > 0  # version 1's text is all still in version 2
    assert f"{job.embedded_chunks} chunks embedded · {job.reused_chunks} unchanged, reused" in page


def test_a_member_of_a_shared_kb_restores(bob_client, bob, versioned, django_capture_on_commit_callbacks):
    versioned.kb.visibility = Visibility.SHARED
    versioned.kb.save()
    versioned.kb.members.add(bob)

    with django_capture_on_commit_callbacks(execute=True):
        assert bob_client.post(restore_url(versioned, 1)).status_code == 302

    assert versioned.versions.get(version=3).created_by == bob


def test_it_lists_versions_with_restore_buttons_for_writers(alice_client, bob_client, versioned):
    versioned.kb.visibility = Visibility.PUBLIC
    versioned.kb.save()

    page = alice_client.get(versioned.get_absolute_url()).content.decode()
    readers_page = bob_client.get(versioned.get_absolute_url()).content.decode()

    assert 'data-version="2"' in page and 'data-version="1"' in page
    assert restore_url(versioned, 1) in page and restore_url(versioned, 2) not in page  # 2 is current
    assert 'data-version="1"' in readers_page and restore_url(versioned, 1) not in readers_page
    main = page.split('id="main"', 1)[1].split("</main>", 1)[0]
    assert "<script" not in main and "onclick" not in main  # the CSP runs no inline script


def test_a_reader_cannot_restore(bob_client, versioned):
    versioned.kb.visibility = Visibility.PUBLIC
    versioned.kb.save()

    assert bob_client.post(restore_url(versioned, 1)).status_code == 403

    versioned.refresh_from_db()
    assert versioned.version == 2 and versioned.versions.count() == 2


def test_an_outsider_cannot_restore(bob_client, versioned):
    assert bob_client.post(restore_url(versioned, 1)).status_code == 404

    versioned.refresh_from_db()
    assert versioned.version == 2 and versioned.versions.count() == 2


def test_it_404s_on_a_version_that_was_never_kept(alice_client, versioned):
    assert alice_client.post(restore_url(versioned, 9)).status_code == 404


def test_it_checks_csrf_on_restore(alice, versioned):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    assert client.post(restore_url(versioned, 1)).status_code == 403

    versioned.refresh_from_db()
    assert versioned.version == 2


def test_it_logs_in_and_out(client, alice):
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302 and response.url == reverse("knowledge-list")
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("knowledge-list")).status_code == 302


def test_a_rows_retry_over_htmx_answers_no_content_and_reingests(alice_client, document, django_capture_on_commit_callbacks):
    url = reverse("document-reingest", args=[document.kb.slug, document.pk])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = alice_client.post(url, headers=HTMX)

    assert response.status_code == 204 and callbacks
