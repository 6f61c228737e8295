"""The verdicts on a proposed rewrite: accept it as a new version of the document, or reject it.

Accepting goes through the document's versioned ingestion (knowledge.editing), so the
edited section is searchable as soon as its chunks are indexed, the other sections keep
their vectors, and the previous version stays restorable. A proposal made against content
that has changed since is refused as a conflict and kept, so nothing the user saw is lost.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from chat.models import DocumentProposal, ProposalStatus
from knowledge.editing import EditConflict, SectionEditError, accept_section_edit
from knowledge.models import KnowledgeBase
from knowledge.tasks import enqueue_ingestion


class ProposalError(Exception):
    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def proposal_for(user, pk: int) -> DocumentProposal | None:
    """The user's own proposal on a document they can still read; None for anyone else's."""
    readable = KnowledgeBase.objects.readable_by(user)
    return (
        DocumentProposal.objects.select_related("document__kb", "turn")
        .filter(pk=pk, user=user, document__kb__in=readable)
        .first()
    )


def accept_proposal(
    proposal: DocumentProposal, user, *, enqueue: Callable[[int], None] = enqueue_ingestion
) -> DocumentProposal:
    if not proposal.document.kb.is_writable_by(user):
        raise ProposalError("You may read this knowledge base but not change its documents.", status=403, code="forbidden")
    try:
        with transaction.atomic():
            locked = DocumentProposal.objects.select_for_update().get(pk=proposal.pk)
            if locked.status != ProposalStatus.PROPOSED:
                raise ProposalError(f"This proposal is already {locked.get_status_display()}.", status=409, code="decided")
            outcome = accept_section_edit(
                locked.document, locked.section_position, locked.proposed_content,
                base_sha256=locked.base_sha256, user=user, enqueue=enqueue,
                note=f"section {locked.turn.section_index or locked.section_position} rewritten in document chat",
            )
            if outcome.status != "queued":
                raise ProposalError(f"The document was not changed: {outcome.message}", status=400, code="unchanged")
            locked.accepted_version = outcome.document.version
            _decide(locked, ProposalStatus.ACCEPTED)
    except EditConflict as error:
        # Outside the rolled-back transaction: the proposal stays, marked, for the user to copy.
        DocumentProposal.objects.filter(pk=proposal.pk).update(status=ProposalStatus.CONFLICT, decided_at=timezone.now())
        raise ProposalError(str(error), status=409, code="conflict") from error
    except SectionEditError as error:
        raise ProposalError(str(error), status=400, code="not_editable") from error
    return locked


def reject_proposal(proposal: DocumentProposal, user) -> DocumentProposal:
    with transaction.atomic():
        locked = DocumentProposal.objects.select_for_update().get(pk=proposal.pk)
        if locked.status != ProposalStatus.PROPOSED:
            raise ProposalError(f"This proposal is already {locked.get_status_display()}.", status=409, code="decided")
        _decide(locked, ProposalStatus.REJECTED)
    return locked


def _decide(proposal: DocumentProposal, status: str) -> None:
    proposal.status, proposal.decided_at = status, timezone.now()
    proposal.save(update_fields=["status", "decided_at", "accepted_version"])
