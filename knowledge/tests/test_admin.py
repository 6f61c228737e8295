from __future__ import annotations

import pytest
from django.urls import reverse

from knowledge.models import Document, DocumentStatus

from .factories import GUIDE_MD
from .test_ingest import _ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", password="root-password")
    client.force_login(admin)
    return client


def test_it_lists_documents_filtered_by_status(admin_client, kb):
    _ingest(kb, "guide.md", GUIDE_MD.encode())
    _ingest(kb, "blob.txt", b"\x00\x01" * 100)

    response = admin_client.get(reverse("admin:knowledge_document_changelist"), {"status__exact": "failed"})

    assert response.status_code == 200
    assert b"blob.txt" in response.content and b"guide.md" not in response.content


def test_it_shows_hashes_read_only(admin_client, kb):
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode())

    response = admin_client.get(reverse("admin:knowledge_document_change", args=[outcome.document.pk]))

    assert response.status_code == 200
    assert b'name="sha256"' not in response.content
    assert outcome.document.sha256.encode() in response.content


def test_it_reingests_selected_documents(admin_client, kb, django_capture_on_commit_callbacks):
    outcome = _ingest(kb, "guide.md", GUIDE_MD.encode())

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            reverse("admin:knowledge_document_changelist"),
            {"action": "reingest", "_selected_action": [outcome.document.pk]},
        )

    assert response.status_code == 302
    document = Document.objects.get(pk=outcome.document.pk)
    assert document.version == 2 and document.live_version == 2
    assert document.status == DocumentStatus.READY


@pytest.mark.parametrize("model", ["knowledgebase", "chunk", "document"])
def test_it_refuses_non_staff(client, alice, model):
    client.force_login(alice)

    response = client.get(reverse(f"admin:knowledge_{model}_changelist"))

    assert response.status_code == 302 and "/login/" in response["Location"]
