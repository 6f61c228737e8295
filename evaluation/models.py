"""Golden questions with their relevant documents (qrels), and the runs measured on them."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models

from knowledge.models import Document, KnowledgeBase

# The mode of a run that scored answers through the chat pipeline (the others are retrieval modes).
ANSWERS_MODE = "answers"
# Percent of questions in the train split; the rest are held out for tuning.
TRAIN_PERCENT = 70


def split_for(qid: str) -> str:
    """Return "train" or "test" for a question id, the same in every process and run."""
    bucket = int.from_bytes(hashlib.sha256(qid.encode("utf-8")).digest()[:4], "big") % 100
    return Split.TRAIN if bucket < TRAIN_PERCENT else Split.TEST


class Split(models.TextChoices):
    TRAIN = "train"
    TEST = "test"


class Difficulty(models.TextChoices):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class ExpectedShortcut(models.TextChoices):
    ANSWER = "none", "answered (no shortcut)"
    A = "A", "A: asks to clarify"
    B = "B", "B: direct system reply"
    C = "C", "C: not found in the knowledge base"


class GoldenSet(models.Model):
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="golden_sets")
    name = models.CharField(max_length=200)
    source = models.CharField(max_length=1000, blank=True, help_text="The file or folder it came from.")
    format = models.CharField(max_length=16, blank=True, help_text="beir, squad, or blank if written by hand.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kb", "name"]
        constraints = [models.UniqueConstraint(fields=["kb", "name"], name="golden_set_unique_name_per_kb")]

    def __str__(self) -> str:
        return f"{self.kb.slug}/{self.name}"


class GoldenQuestion(models.Model):
    golden_set = models.ForeignKey(GoldenSet, models.CASCADE, related_name="questions")
    qid = models.CharField("question id", max_length=200)
    text = models.TextField()
    category = models.CharField(max_length=100, blank=True)
    expected_keywords = models.JSONField(default=list, blank=True)
    reference_answer = models.TextField(blank=True)
    difficulty = models.CharField(max_length=16, choices=Difficulty.choices, blank=True)
    expected_shortcut = models.CharField(
        max_length=8, choices=ExpectedShortcut.choices, blank=True,
        help_text="What the chat should do, scored by answer evaluation; blank when not stated.",
    )
    split = models.CharField(max_length=8, choices=Split.choices, editable=False)
    documents = models.ManyToManyField(Document, through="RelevantDocument", related_name="+")

    class Meta:
        ordering = ["golden_set", "qid"]
        constraints = [
            models.UniqueConstraint(fields=["golden_set", "qid"], name="golden_question_unique_qid")
        ]

    def __str__(self) -> str:
        return f"{self.qid}: {self.text[:60]}"

    @property
    def keyword_labels(self) -> list[str]:
        """The expected keywords as shown: alternatives joined by " | "."""
        return [" | ".join(k) if isinstance(k, list) else k for k in self.expected_keywords]

    def save(self, *args, **kwargs) -> None:
        self.split = split_for(self.qid)
        super().save(*args, **kwargs)


class RelevantDocument(models.Model):
    """One qrel: a document that answers a question, with its graded relevance."""

    question = models.ForeignKey(GoldenQuestion, models.CASCADE, related_name="qrels")
    document = models.ForeignKey(Document, models.CASCADE, related_name="+")
    relevance = models.IntegerField(default=1, help_text="Graded gain; 0 or less is not relevant.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["question", "document"], name="qrel_unique_per_question")
        ]

    def __str__(self) -> str:
        return f"{self.question_id} → {self.document_id} ({self.relevance})"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class EvaluationRun(models.Model):
    kb = models.ForeignKey(KnowledgeBase, models.CASCADE, related_name="evaluation_runs")
    golden_set = models.ForeignKey(
        GoldenSet, models.SET_NULL, null=True, blank=True, related_name="runs",
        help_text="Blank when the run covered every golden set of the KB.",
    )
    mode = models.CharField(max_length=16)
    split = models.CharField(max_length=8, default="all")
    questions = models.PositiveIntegerField(default=0)
    params = models.JSONField(default=dict, help_text="The retrieval parameters, as run.")
    metrics = models.JSONField(default=dict)
    baseline = models.JSONField(null=True, blank=True)
    qps = models.FloatField(default=0.0)
    latency = models.JSONField(default=dict, help_text="Milliseconds per query: p50, p95.")
    per_question = models.JSONField(default=dict, blank=True, help_text="qid → its metrics.")
    created_at = models.DateTimeField(auto_now_add=True)
    # A run started in the browser waits for a background task; one from manage.py is done
    # when it is stored.
    status = models.CharField(max_length=8, choices=RunStatus.choices, default=RunStatus.DONE)
    progress = models.PositiveSmallIntegerField(default=100, help_text="Percent of the questions asked.")
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="Who started it in the browser; answer runs ask as this user.",
    )

    class Meta:
        ordering = ["-created_at"]

    @property
    def is_answer_run(self) -> bool:
        return self.mode == ANSWERS_MODE

    @property
    def agent(self) -> str:
        """An answer run's worker type: as queued, then as its configuration snapshot says."""
        return self.params.get("agent") or self.params.get("chat", {}).get("agent_type", "auto")

    @property
    def is_finished(self) -> bool:
        return self.status in (RunStatus.DONE, RunStatus.FAILED)

    def __str__(self) -> str:
        return f"{self.kb.slug} {self.mode} {self.created_at:%Y-%m-%d %H:%M}"
