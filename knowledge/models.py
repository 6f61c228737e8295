"""Knowledge bases, their documents and the parent/child chunks retrieval reads."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models, transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy

from agentic_rag.vectors import EmbeddingField


class Visibility(models.TextChoices):
    PRIVATE = "private", "Private (owner only)"
    SHARED = "shared", "Shared (owner and members)"
    PUBLIC = "public", "Public (every signed-in user)"


class KnowledgeBaseQuerySet(models.QuerySet):
    def readable_by(self, user) -> KnowledgeBaseQuerySet:
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        shared = Q(visibility=Visibility.SHARED, members=user)
        return self.filter(Q(owner=user) | shared | Q(visibility=Visibility.PUBLIC)).distinct()

    def writable_by(self, user) -> KnowledgeBaseQuerySet:
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        member = Q(members=user) & ~Q(visibility=Visibility.PRIVATE)
        return self.filter(Q(owner=user) | member).distinct()


class AnswerMode(models.TextChoices):
    AUTO = "auto", "A language model when one answers, else quotes from the sources"
    EXTRACTIVE = "extractive", "Always quotes from the sources (no language model)"


class KnowledgeBase(models.Model):
    slug = models.SlugField("kb_prefix", max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="owned_knowledge_bases"
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="knowledge_bases"
    )
    visibility = models.CharField(
        max_length=16, choices=Visibility.choices, default=Visibility.PRIVATE
    )
    # Bumped on every change to the KB's live chunks, so caches and in-process indexes
    # in any process can tell they are stale.
    content_version = models.PositiveBigIntegerField(default=0)
    embedder = models.CharField(
        max_length=100, blank=True, help_text="The embedder that built the KB's vectors."
    )
    # Fusion mode, weights and leg thresholds, as `manage.py evaluate --tune` stores them;
    # knowledge.retrieval.params_for_kb turns them into RetrievalParams.
    retrieval_settings = models.JSONField(default=dict, blank=True)
    answer_mode = models.CharField(
        max_length=16, choices=AnswerMode.choices, default=AnswerMode.AUTO,
        help_text="How the chat writes answers from this knowledge base.",
    )
    answer_model = models.ForeignKey(
        "agentic_rag.ModelProvider", models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name="preferred model", help_text="Tried first for answers; the others follow if it fails.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = KnowledgeBaseQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def kb_prefix(self) -> str:
        return self.slug

    # Fields that only their own functions move (bump_content_version, reembed,
    # save_params_for_kb): saving a stale instance from a form must not move them back,
    # or another process could keep serving an index of older content.
    MANAGED_FIELDS = frozenset({"content_version", "embedder", "retrieval_settings"})

    def save(self, *args, **kwargs) -> None:
        if self.pk and not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                field.name for field in self._meta.concrete_fields
                if not field.primary_key and field.name not in self.MANAGED_FIELDS
            ]
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("knowledge-detail", args=[self.slug])

    def is_writable_by(self, user) -> bool:
        return KnowledgeBase.objects.writable_by(user).filter(pk=self.pk).exists()

    def document_counts(self) -> dict[str, int]:
        """Count documents by state, with their characters and child chunks."""
        return self.documents.aggregate(
            documents=Count("pk"),
            ready=Count("pk", filter=Q(status=DocumentStatus.READY)),
            in_progress=Count("pk", filter=Q(status__in=IN_PROGRESS)),
            failed=Count("pk", filter=Q(status=DocumentStatus.FAILED)),
            characters=Coalesce(Sum("char_count"), 0),
            chunks=Coalesce(Sum("chunk_count"), 0),
        )

    def bump_content_version(self, documents: Iterable[int] | None = None) -> int:
        """Move the content version on, recording which documents changed; return the new version.

        `documents` None means anything may have changed: processes rebuild their index of
        the KB instead of reloading just those documents' chunks.
        """
        with transaction.atomic():
            KnowledgeBase.objects.filter(pk=self.pk).update(content_version=F("content_version") + 1)
            # The update holds the row's lock (SQLite: the database's) until the commit, so
            # this reads this bump's number, and the record commits with it.
            version = KnowledgeBase.objects.filter(pk=self.pk).values_list("content_version", flat=True).get()
            ContentChange.objects.record(self.pk, version, documents)
        return version


class DocumentStatus(models.TextChoices):
    # Labels translated where shown (get_status_display); the stored values stay English.
    PENDING = "pending", gettext_lazy("Pending")
    PARSING = "parsing", gettext_lazy("Parsing")
    CHUNKING = "chunking", gettext_lazy("Chunking")
    EMBEDDING = "embedding", gettext_lazy("Embedding")
    INDEXING = "indexing", gettext_lazy("Indexing")
    READY = "ready", gettext_lazy("Ready")
    FAILED = "failed", gettext_lazy("Failed")


IN_PROGRESS = (
    DocumentStatus.PENDING,
    DocumentStatus.PARSING,
    DocumentStatus.CHUNKING,
    DocumentStatus.EMBEDDING,
    DocumentStatus.INDEXING,
)


class DocumentQuerySet(models.QuerySet):
    def stalled(self, cutoff: datetime) -> DocumentQuerySet:
        """Documents in progress whose run last showed life before `cutoff`: its process died."""
        return self.filter(status__in=IN_PROGRESS, heartbeat_at__lt=cutoff)


class Document(models.Model):
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="documents")
    name = models.CharField(max_length=255, help_text="File name, unique in its knowledge base.")
    source = models.CharField(max_length=1000, blank=True, help_text="Where the file came from.")
    mime = models.CharField(max_length=100, blank=True)
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    # `version` is the newest accepted content; `live_version` is the one whose chunks
    # serve retrieval. They differ while a new version is being ingested.
    version = models.PositiveIntegerField(default=1)
    live_version = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.PENDING
    )
    progress = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    char_count = models.PositiveIntegerField(default=0)
    parent_count = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0, help_text="Child chunks.")
    metadata = models.JSONField(default=dict, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ingested_at = models.DateTimeField(null=True, blank=True)
    # The run ingesting the document holds it (knowledge.liveness): `running_job` names the
    # run, which writes `heartbeat_at` at its batch boundaries; a heartbeat older than
    # INGESTION_STALE_S is a dead run's, which a sweep takes over. `interruptions` counts the
    # runs of this version that died, so the page can say so and a document that kills its
    # worker every time fails instead of looping.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    running_job = models.ForeignKey(
        "IngestionJob", models.SET_NULL, null=True, blank=True, related_name="+"
    )
    interruptions = models.PositiveSmallIntegerField(default=0)

    objects = DocumentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["kb", "name"], name="document_unique_name_per_kb"),
            models.UniqueConstraint(fields=["kb", "sha256"], name="document_unique_sha256_per_kb"),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("document-detail", args=[self.kb.slug, self.pk])

    @property
    def is_in_progress(self) -> bool:
        return self.status in IN_PROGRESS

    @property
    def is_live(self) -> bool:
        return self.live_version > 0

    @property
    def is_interrupted(self) -> bool:
        """Whether a run of this version died and the next has not started yet."""
        if not self.is_in_progress:
            return False
        if self.heartbeat_at is None:  # queued again by a sweep, or never started
            return self.interruptions > 0
        return self.heartbeat_at < timezone.now() - timedelta(seconds=settings.INGESTION_STALE_S)


class DocumentFile(models.Model):
    """The bytes of a document's newest version, kept in the database so any worker can read them."""

    document = models.OneToOneField(
        Document, models.CASCADE, primary_key=True, related_name="file"
    )
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"file of {self.document_id}"


class DocumentVersion(models.Model):
    """The bytes of one version of a document, kept so any version can be restored."""

    document = models.ForeignKey(Document, models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    data = models.BinaryField()
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    # A default rather than auto_now_add, so the backfill can date versions it did not see made.
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["document_id", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["document", "version"], name="document_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id} v{self.version}"


class ChunkQuerySet(models.QuerySet):
    def for_kb(self, kb: KnowledgeBase) -> ChunkQuerySet:
        return self.filter(kb=kb)

    def live(self) -> ChunkQuerySet:
        return self.filter(version=F("document__live_version"))

    def parents(self) -> ChunkQuerySet:
        return self.filter(level=Chunk.PARENT)

    def children(self) -> ChunkQuerySet:
        return self.filter(level=Chunk.CHILD)

    def without_entry(self, embedder_name: str) -> ChunkQuerySet:
        """Chunks that have no search entry (vector) made by `embedder_name`."""
        return self.exclude(search_entries__embedder=embedder_name)


class Chunk(models.Model):
    PARENT = 0
    CHILD = 1
    LEVELS = [(PARENT, "parent"), (CHILD, "child")]

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="chunks")
    document = models.ForeignKey(Document, models.CASCADE, related_name="chunks")
    version = models.PositiveIntegerField(help_text="The document version this chunk belongs to.")
    parent = models.ForeignKey(
        "self", models.CASCADE, null=True, blank=True, related_name="children"
    )
    level = models.PositiveSmallIntegerField(choices=LEVELS)
    index = models.PositiveIntegerField(help_text="Order within the document, per level.")
    text = models.TextField()
    token_count = models.PositiveIntegerField(default=0)
    section_index = models.CharField(max_length=32, blank=True)
    section_title = models.CharField(max_length=500, blank=True)
    chapter_level_1 = models.CharField(max_length=500, blank=True)
    chapter_level_2 = models.CharField(max_length=500, blank=True)
    tags = models.JSONField(default=list, blank=True)
    sha256 = models.CharField(max_length=64)

    objects = ChunkQuerySet.as_manager()

    class Meta:
        ordering = ["document_id", "level", "index"]
        indexes = [
            models.Index(fields=["document", "version", "level", "index"]),
            models.Index(fields=["kb", "level"]),
            # Multipath's same-chapter recall path looks chunks up by chapter.
            models.Index(fields=["kb", "chapter_level_1", "chapter_level_2"]),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}:{self.get_level_display()}:{self.index}"


class IngestionJob(models.Model):
    """One run of the ingestion pipeline over one document version, with its stage timings."""

    document = models.ForeignKey(Document, models.CASCADE, related_name="jobs")
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=DocumentStatus.choices)
    stage = models.CharField(max_length=32, blank=True)
    percent = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    timings_ms = models.JSONField(default=dict, blank=True)
    # Chunks whose vectors were computed, and those carried over from the live version
    # because their search text did not change.
    embedded_chunks = models.PositiveIntegerField(default=0)
    reused_chunks = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=1)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"job {self.pk} for {self.document_id} v{self.version}: {self.status}"


class SearchEntry(models.Model):
    """What retrieval searches for one chunk under one embedder: its vector and its tokens."""

    chunk = models.ForeignKey(Chunk, models.CASCADE, related_name="search_entries")
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="+")
    level = models.PositiveSmallIntegerField(choices=Chunk.LEVELS)
    embedder = models.CharField(max_length=100)
    dims = models.PositiveIntegerField()
    embedding = EmbeddingField()
    # knowledge.analysis tokens joined by spaces: BM25 reads them, and PostgreSQL's
    # full-text index parses them with the 'simple' configuration.
    tokens = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chunk", "embedder"], name="search_entry_unique_per_embedder"),
        ]
        indexes = [models.Index(fields=["kb", "embedder", "level"])]

    def __str__(self) -> str:
        return f"{self.chunk_id} by {self.embedder}"


# Change records kept per KB: a process whose index is older than this many changes
# rebuilds it, as it would for a change this large anyway.
CONTENT_CHANGES_KEPT = 1000


class ContentChangeQuerySet(models.QuerySet):
    def record(self, kb_id: int, version: int, documents: Iterable[int] | None) -> None:
        """Record what one bump changed, and forget the KB's records CONTENT_CHANGES_KEPT bumps old."""
        listed = None if documents is None else sorted(set(documents))
        self.create(kb_id=kb_id, version=version, documents=listed)
        self.filter(kb_id=kb_id, version__lte=version - CONTENT_CHANGES_KEPT).delete()

    def documents_changed(self, kb_id: int, *, since: int, until: int) -> set[int] | None:
        """The ids of the documents changed after version `since` up to `until`, or None if unknown.

        Unknown: a version in between has no record (pruned, or bumped before records
        were kept) or changed anything (its documents are None).
        """
        if until < since or until - since > CONTENT_CHANGES_KEPT:
            return None
        if until == since:
            return set()
        changes = list(
            self.filter(kb_id=kb_id, version__gt=since, version__lte=until).values_list("documents", flat=True)
        )
        if len(changes) != until - since or any(documents is None for documents in changes):
            return None
        return {document for documents in changes for document in documents}


class ContentChange(models.Model):
    """Which documents one bump of a KB's content_version changed: in-process indexes reload just those."""

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="+")
    version = models.PositiveBigIntegerField()
    # Ids of documents added, replaced or deleted (so no foreign key); null: anything.
    documents = models.JSONField(null=True, blank=True)

    objects = ContentChangeQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kb", "version"], name="content_change_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.kb_id} v{self.version}: {self.documents}"


class TermPairQuerySet(models.QuerySet):
    def counts_for_kb(self, kb_id: int) -> list[tuple[str, str, int]]:
        """(Chinese, English, times stated) over the KB's documents."""
        rows = self.filter(kb_id=kb_id).values("chinese", "english").annotate(total=Sum("count"))
        return [(row["chinese"], row["english"], row["total"]) for row in rows.order_by("chinese", "english")]


class TermPair(models.Model):
    """A Chinese term and its English, stated side by side in a document ("质量门控(quality_gate.py)").

    The KB's query expansion translates its own terms with them (knowledge.terms).
    """

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="+")
    document = models.ForeignKey(Document, models.CASCADE, related_name="term_pairs")
    chinese = models.CharField(max_length=64)
    english = models.CharField(max_length=200)
    count = models.PositiveIntegerField(default=1)

    objects = TermPairQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "chinese", "english"], name="term_pair_unique_per_document"),
        ]
        indexes = [models.Index(fields=["kb"], name="term_pair_kb")]

    def __str__(self) -> str:
        return f"{self.chinese} = {self.english}"


class UnitVector(models.Model):
    """A sentence encoder's vector of one unit (sentence, item, row) of a document, by its text's
    hash: encoded at ingestion, so the reader compares a question with units without encoding them."""

    document = models.ForeignKey(Document, models.CASCADE, related_name="unit_vectors")
    encoder = models.CharField(max_length=64)
    key = models.CharField(max_length=40)  # agentic_rag.embeddings.text_key of the unit's text
    vector = models.BinaryField()  # float16

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "encoder", "key"], name="unit_vector_unique_per_document"),
        ]
        indexes = [models.Index(fields=["encoder", "key"], name="unit_vector_lookup")]

    def __str__(self) -> str:
        return f"{self.document_id}:{self.encoder}:{self.key[:8]}"
