"""Platform models shared by every app: per-user API tokens for /api/*."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX = "arag_"
# Shown in lists so a person can tell their tokens apart; too short to guess the rest.
DISPLAY_CHARS = len(KEY_PREFIX) + 6


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True, user__is_active=True)

    def for_user(self, user) -> ApiTokenQuerySet:
        return self.filter(user=user)


class ApiToken(models.Model):
    """A bearer key for the HTTP API; only its sha256 is stored, the key is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, db_index=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str) -> tuple[ApiToken, str]:
        """Create a token for user; return it with its key, which is never stored."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=hash_key(key), prefix=key[:DISPLAY_CHARS])
        return token, key

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def mark_used(self) -> None:
        self.last_used_at = timezone.now()
        ApiToken.objects.filter(pk=self.pk).update(last_used_at=self.last_used_at)


class ModelProvider(models.Model):
    """An OpenAI-compatible chat model added in the app's settings page (staff).

    The router tries the environment's model first (LLM_PROVIDERS), then these by position,
    then the extractive reader. The API key is stored encrypted with a key derived from
    SECRET_KEY, or named as an environment variable so it never enters the database.
    """

    name = models.SlugField(max_length=64, unique=True, help_text="Shown in traces and on the settings page.")
    base_url = models.URLField("base URL", max_length=500, help_text="For example https://api.deepseek.com/v1.")
    model = models.CharField(max_length=200)
    api_key_encrypted = models.TextField(blank=True, editable=False)
    api_key_env = models.CharField(
        "API key from environment variable", max_length=100, blank=True,
        help_text="The name of an environment variable holding the key, instead of storing it.",
    )
    connect_timeout_s = models.FloatField("connect timeout (s)", default=5.0)
    first_token_timeout_s = models.FloatField("first token timeout (s)", default=15.0)
    total_timeout_s = models.FloatField("total timeout (s)", default=120.0)
    enabled = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"


class WebSearchSettings(models.Model):
    """The web search, as set on the Language models page (staff); one row, which once saved
    replaces the environment's WEB_SEARCH_* settings. Off until enabled."""

    class Provider(models.TextChoices):
        SEARXNG = "searxng", "SearXNG"
        BRAVE = "brave", "Brave Search"

    enabled = models.BooleanField(default=False)
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.SEARXNG)
    base_url = models.URLField("base URL", max_length=500, blank=True)
    api_key_env = models.CharField("API key from environment variable", max_length=100, blank=True)
    allow_domains = models.TextField(blank=True)
    deny_domains = models.TextField(blank=True)
    max_results = models.PositiveSmallIntegerField(default=5)
    pages_per_query = models.PositiveSmallIntegerField(default=3)
    connect_timeout_s = models.FloatField("connect timeout (s)", default=3.0)
    read_timeout_s = models.FloatField("read timeout (s)", default=5.0)
    total_timeout_s = models.FloatField("total timeout (s)", default=6.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "web search settings"

    def __str__(self) -> str:
        return f"{self.get_provider_display()} ({'on' if self.enabled else 'off'})"
