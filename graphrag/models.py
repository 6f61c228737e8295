"""A knowledge base's graph: entities, relations, the chunks they come from, communities, builds.

Every entity and relation links back to the child chunks it was read from (Mention, and a
relation's evidence), so the graph is a view over the KB's text, never a second copy of it.
GraphDocument records which version of each document the graph holds, which makes a build
incremental (only documents whose fingerprint moved are read again) and idempotent.
"""

from __future__ import annotations

from django.db import models

from knowledge.models import Chunk, Document, KnowledgeBase


class EntityType(models.TextChoices):
    """The node types, each drawn in its own colour.

    The first eleven are the seed's; the rest come from a document's structure (sections,
    fields, code identifiers) and from the part-of-speech tags of names (people, places,
    organisations), so text about neither technology nor code is not all "concept".
    """

    TECHNOLOGY = "technology"
    CONCEPT = "concept"
    STAGE = "stage"
    SHORTCUT = "shortcut"
    STORAGE = "storage"
    FRAMEWORK = "framework"
    MODEL = "model"
    LAYER = "layer"
    PRIORITY = "priority"
    TOOL = "tool"
    METRIC = "metric"
    SECTION = "section"
    FIELD = "field"
    MODULE = "module"
    FILE = "file"
    CLASS = "class"
    FUNCTION = "function"
    PERSON = "person"
    PLACE = "place"
    ORGANIZATION = "organization"


class Entity(models.Model):
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="entities")
    name = models.CharField(max_length=200, help_text="The most frequent surface form.")
    key = models.CharField(max_length=200, help_text="Normalised name, unique in the KB.")
    type = models.CharField(max_length=16, choices=EntityType.choices, default=EntityType.CONCEPT)
    aliases = models.JSONField(default=list, blank=True)
    mention_count = models.PositiveIntegerField(default=0)
    description = models.TextField(blank=True)
    embedding = models.BinaryField(null=True, blank=True, help_text="float32 vector of the name.")
    community = models.ForeignKey(
        "Community", models.SET_NULL, null=True, blank=True, related_name="members"
    )

    class Meta:
        verbose_name_plural = "entities"
        ordering = ["-mention_count", "name"]
        constraints = [models.UniqueConstraint(fields=["kb", "key"], name="entity_unique_key_per_kb")]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class Relation(models.Model):
    EXPLICIT = 1.0  # a rule pattern, the document's structure or an LLM named the relation
    # The two were mentioned close together in one paragraph: a weak edge, kept few (see
    # graphrag.build.strongest_cooccurrences) and weighted well below a stated relation.
    CO_OCCURRENCE = 0.2

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="relations")
    document = models.ForeignKey(Document, models.CASCADE, related_name="relations")
    source = models.ForeignKey(Entity, models.CASCADE, related_name="outgoing")
    target = models.ForeignKey(Entity, models.CASCADE, related_name="incoming")
    relation = models.CharField(max_length=32, help_text="is_a, uses, 包含, … or co_occurs.")
    weight = models.FloatField(default=CO_OCCURRENCE)
    evidence = models.JSONField(default=list, help_text="Ids of the chunks that state it.")

    class Meta:
        ordering = ["-weight", "id"]
        indexes = [models.Index(fields=["kb", "source"]), models.Index(fields=["kb", "target"])]

    def __str__(self) -> str:
        return f"{self.source.name} -{self.relation}-> {self.target.name}"


class Mention(models.Model):
    entity = models.ForeignKey(Entity, models.CASCADE, related_name="mentions")
    chunk = models.ForeignKey(Chunk, models.CASCADE, related_name="mentions")
    document = models.ForeignKey(Document, models.CASCADE, related_name="mentions")
    surface = models.CharField(max_length=200)
    count = models.PositiveIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["entity"]), models.Index(fields=["document"])]
        constraints = [models.UniqueConstraint(fields=["entity", "chunk"], name="mention_once_per_chunk")]


class Community(models.Model):
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="communities")
    level = models.PositiveSmallIntegerField(default=0, help_text="0 the top, higher levels split it.")
    parent = models.ForeignKey("self", models.CASCADE, null=True, blank=True, related_name="children")
    title = models.CharField(max_length=300)
    summary = models.TextField(blank=True)
    rank = models.FloatField(default=0.0, help_text="Weight of its members' mentions.")
    size = models.PositiveIntegerField(default=0)
    chunk_ids = models.JSONField(default=list, help_text="The chunks its summary was read from.")

    class Meta:
        verbose_name_plural = "communities"
        ordering = ["level", "-rank"]

    def __str__(self) -> str:
        return self.title


class GraphDocument(models.Model):
    """Which version of a document the graph holds; a build skips it while it matches.

    `entity_ids` are the entities it mentioned: when a new version or a deletion takes its
    chunks (and mentions) away, the next build recounts exactly those. Deleting the document
    empties `document` instead of removing the row, so the build still finds them.
    """

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="+")
    document = models.OneToOneField(Document, models.SET_NULL, null=True, related_name="graph_state")
    fingerprint = models.CharField(max_length=100)
    extractor = models.CharField(max_length=64)
    entity_ids = models.JSONField(default=list)
    built_at = models.DateTimeField(auto_now=True)


class GraphBuild(models.Model):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED)]

    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="graph_builds")
    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED)
    full = models.BooleanField(default=False)
    progress = models.PositiveSmallIntegerField(default=0)
    extractor = models.CharField(max_length=64, blank=True)
    embedder = models.CharField(max_length=100, blank=True)
    documents = models.PositiveIntegerField(default=0, help_text="Documents read in this build.")
    entities = models.PositiveIntegerField(default=0)
    relations = models.PositiveIntegerField(default=0)
    communities = models.PositiveIntegerField(default=0)
    llm_calls = models.PositiveIntegerField(default=0)
    timings_ms = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True, help_text="What the build noticed: fallbacks, skipped input.")
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.kb.slug} graph build {self.pk} ({self.status})"
