"""What the chat's management commands share: the user a command acts as."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from knowledge.models import KnowledgeBase


def command_user(username: str | None, kb_slug: str | None) -> Any:
    """The named user, else the KB's owner, else the demo user; CommandError when none exists."""
    users = get_user_model().objects
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user '{username}'")
        return user
    kb = KnowledgeBase.objects.filter(slug=kb_slug).select_related("owner").first() if kb_slug else None
    user = kb.owner if kb and kb.owner else users.filter(username=settings.DEMO_USERNAME).first()
    if user is None:
        raise CommandError("pass --user USERNAME (there is no demo user; run manage.py setup_demo)")
    return user
