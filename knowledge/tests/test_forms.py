"""The knowledge base form never confirms that another user's private knowledge base exists."""

from __future__ import annotations

import pytest

from knowledge.forms import KnowledgeBaseCreateForm
from knowledge.models import KnowledgeBase, Visibility

pytestmark = pytest.mark.django_db


def _slug_errors(owner, slug: str) -> list[str]:
    form = KnowledgeBaseCreateForm(
        {"name": "Specs", "slug": slug, "visibility": "private"}, instance=KnowledgeBase(owner=owner)
    )
    assert not form.is_valid()
    return form.errors["slug"]


@pytest.mark.parametrize("visibility", [Visibility.PRIVATE, Visibility.SHARED, Visibility.PUBLIC])
def test_a_slug_taken_by_another_user_says_only_to_choose_another_name(alice, bob, visibility):
    KnowledgeBase.objects.create(slug="bob-notes", name="Bob's notes", owner=bob, visibility=visibility)

    errors = _slug_errors(alice, "bob-notes")

    assert errors == ["This short name is not available; choose another name."]
    assert not any("exist" in error for error in errors)


def test_a_slug_of_ones_own_kb_reads_the_same_as_someone_elses(alice, bob):
    KnowledgeBase.objects.create(slug="mine", name="Mine", owner=alice)
    KnowledgeBase.objects.create(slug="theirs", name="Theirs", owner=bob)

    assert _slug_errors(alice, "mine") == _slug_errors(alice, "theirs")
