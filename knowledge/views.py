"""Pages of the knowledge app: knowledge bases, their documents, upload, delete, re-ingest, restore."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, TooManyFilesSent
from django.core.files.uploadedfile import UploadedFile
from django.db.models import Count, Prefetch, Q, Sum
from django.db.models.functions import Coalesce, Length
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .forms import KnowledgeBaseCreateForm, KnowledgeBaseSettingsForm, UploadForm
from .graph_leg import graph_leg_summary
from .ingest import (
    SubmitOutcome,
    check_upload,
    delete_document,
    request_reingest,
    restore_version,
    submit_document,
)
from .models import Chunk, Document, DocumentStatus, DocumentVersion, KnowledgeBase
from .parsing import SUPPORTED_EXTENSIONS
from .progress import background_indexing
from .reading import OutlineItem, outline_items, page_numbers, readable_sections, visible_outline
from .tasks import enqueue_ingestion

DETAIL = "knowledge/kb_detail.html"

# Stored values the templates translate with {% translate value %}: a KB's visibility as its
# badge shows it, and upload outcomes. Marked here so that makemessages finds them.
TEMPLATE_LABELS = (
    gettext_noop("private"),
    gettext_noop("shared"),
    gettext_noop("public"),
    gettext_noop("queued"),
    gettext_noop("unchanged"),
    gettext_noop("rejected"),
)


def _get_kb_for_user(request: HttpRequest, slug: str) -> KnowledgeBase:
    """Return a KB the user may read; 404 for any other, so existence never leaks."""
    return get_object_or_404(KnowledgeBase.objects.readable_by(request.user), slug=slug)


def _get_rw_kb_for_user(request: HttpRequest, slug: str) -> KnowledgeBase:
    kb = _get_kb_for_user(request, slug)
    if not kb.is_writable_by(request.user):
        raise PermissionDenied  # a reader already knows the KB exists
    return kb


def _get_owned_kb_for_user(request: HttpRequest, slug: str) -> KnowledgeBase:
    kb = _get_kb_for_user(request, slug)
    if kb.owner_id != request.user.pk and not request.user.is_superuser:
        raise PermissionDenied
    return kb


def _get_document_for_user(request, slug: str, pk: int, *, write: bool = False) -> Document:
    kb = _get_rw_kb_for_user(request, slug) if write else _get_kb_for_user(request, slug)
    return get_object_or_404(kb.documents.select_related("kb"), pk=pk)


def _detail_context(request: HttpRequest, kb: KnowledgeBase, **extra) -> dict:
    return {
        "kb": kb,
        "counts": kb.document_counts(),
        "documents": kb.documents.all(),
        "can_write": kb.is_writable_by(request.user),
        "is_owner": kb.owner_id == request.user.pk or request.user.is_superuser,
        "accept": ",".join(sorted(SUPPORTED_EXTENSIONS)),
        "max_upload_mb": settings.MAX_UPLOAD_MB,
        "max_upload_files": settings.DATA_UPLOAD_MAX_NUMBER_FILES,
        "form": UploadForm(),
        "background": background_indexing(kb.pk),
        **extra,
    }


@login_required
@require_GET
def knowledge_list(request: HttpRequest) -> HttpResponse:
    # Annotate outside readable_by(): its members join would multiply the counted rows.
    readable = KnowledgeBase.objects.readable_by(request.user).values("pk")
    kbs = (
        KnowledgeBase.objects.filter(pk__in=readable)
        .select_related("owner")
        .annotate(
            document_count=Count("documents"),
            ready_count=Count("documents", filter=Q(documents__status=DocumentStatus.READY)),
            chunk_count=Coalesce(Sum("documents__chunk_count"), 0),
        )
    )
    return render(request, "knowledge/kb_list.html", {"kbs": kbs})


@login_required
@require_http_methods(["GET", "POST"])
def knowledge_create(request: HttpRequest) -> HttpResponse:
    kb = KnowledgeBase(owner=request.user)
    form = KnowledgeBaseCreateForm(request.POST or None, instance=kb)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Created knowledge base “%(name)s”.") % {"name": kb.name})
        return redirect(kb)
    return render(request, "knowledge/kb_form.html", {"form": form, "kb": None})


@login_required
@require_http_methods(["GET", "POST"])
def knowledge_settings(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_owned_kb_for_user(request, slug)
    form = KnowledgeBaseSettingsForm(request.POST or None, instance=kb)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Settings saved."))
        return redirect(kb)
    return render(request, "knowledge/kb_form.html", {"form": form, "kb": kb, "graph_leg": graph_leg_summary(kb)})


@login_required
@require_GET
def knowledge_detail(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    return render(request, DETAIL, _detail_context(request, kb))


# The CSRF check runs in _submit_upload, after the body is parsed: Django refuses a body
# with more than DATA_UPLOAD_MAX_NUMBER_FILES files while parsing it (in the CSRF
# middleware, as a bare 400), and the person uploading should read why instead.
@csrf_exempt
@login_required
@require_POST
def knowledge_upload(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    try:
        form = UploadForm(request.POST, request.FILES)
    except TooManyFilesSent:
        # Nothing is read or written on this path, so it needs no CSRF check.
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
        error = _("Too many files in one upload: at most %(limit)s at a time. Nothing was uploaded.") % {
            "limit": limit
        }
        return _render_upload(request, kb, [], error=error)
    return _submit_upload(request, kb, form)


@csrf_protect
def _submit_upload(request: HttpRequest, kb: KnowledgeBase, form: UploadForm) -> HttpResponse:
    if not form.is_valid():
        return _render_upload(request, kb, [], error=" ".join(form.errors["files"]))
    outcomes = [_submit_file(kb, upload, request.user) for upload in form.cleaned_data["files"]]
    return _render_upload(request, kb, outcomes)


def _submit_file(kb: KnowledgeBase, upload: UploadedFile, user) -> SubmitOutcome:
    # Refuse by the declared size first, so an oversize file is never read into memory.
    error = check_upload(upload.name, upload.size)
    if error:
        return SubmitOutcome(upload.name, "rejected", error)
    return submit_document(kb, upload.name, upload.read(), enqueue=enqueue_ingestion, user=user)


def _render_upload(request, kb, outcomes: list[SubmitOutcome], *, error: str = "") -> HttpResponse:
    context = _detail_context(request, kb, outcomes=outcomes, upload_error=error)
    if request.htmx:
        return render(request, f"{DETAIL}#upload-response", context)
    return render(request, DETAIL, context)


@login_required
@require_GET
def document_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    document = _get_document_for_user(request, slug, pk)
    # The text reads the document; the chunks show how it was cut. A citation's #chunk-<id>
    # lands on its passage in either.
    view = "chunks" if request.GET.get("view") == "chunks" else "text"
    page = _document_page(document, request.GET)
    context = {
        "kb": document.kb,
        "document": document,
        "view": view,
        "sections": readable_sections(page.parents) if view == "text" else [],
        "parents": page.parents,
        "outline": page.outline,
        "page": page,
        "can_write": document.kb.is_writable_by(request.user),
        "versions": document.versions.defer("data").select_related("created_by"),
        "last_job": document.jobs.filter(status=DocumentStatus.READY).first(),
    }
    return render(request, "knowledge/document_detail.html", context)


@dataclass(frozen=True)
class _DocumentPage:
    number: int  # 1-based
    count: int
    parents: list[Chunk]  # this page's parents, their children prefetched in order
    outline: list[OutlineItem]  # the document's sections, each with its page (bounded: visible_outline)


def _document_page(document: Document, query: QueryDict) -> _DocumentPage:
    """The page of the document that `?chunk=<id>` (a citation) or `?page=<n>` asks for.

    A page holds about DOCUMENT_PAGE_CHARS of text in at most DOCUMENT_PAGE_PARENTS parents,
    so a request's work is bounded by those,
    not by the document's size; the outline lists the sections and their pages.
    """
    heads = list(
        Chunk.objects.live().parents().filter(document=document).order_by("index")
        .only("pk", "section_index", "section_title", "chapter_level_1", "chapter_level_2")
        .annotate(chars=Length("text"))
    )
    pages = page_numbers([head.chars for head in heads], settings.DOCUMENT_PAGE_CHARS, settings.DOCUMENT_PAGE_PARENTS)
    count = pages[-1] if pages else 1
    number = _page_asked(query, document, dict(zip((head.pk for head in heads), pages)), count)
    children = Prefetch("children", queryset=Chunk.objects.order_by("index"))
    on_page = [head.pk for head, page in zip(heads, pages) if page == number]
    parents = list(Chunk.objects.filter(pk__in=on_page).order_by("index").prefetch_related(children))
    outline = visible_outline(outline_items(heads, pages), number, settings.DOCUMENT_OUTLINE_ITEMS)
    return _DocumentPage(number, count, parents, outline)


def _page_asked(query: QueryDict, document: Document, page_of_parent: dict[int, int], count: int) -> int:
    """The page of the chunk `?chunk=` names (a parent or a child), else `?page=`, else the first."""
    chunk = query.get("chunk", "")
    if chunk.isdigit():
        asked = Chunk.objects.filter(pk=int(chunk), document=document).values_list("pk", "parent_id").first()
        if asked and (asked[1] or asked[0]) in page_of_parent:
            return page_of_parent[asked[1] or asked[0]]
    page = query.get("page", "")
    return min(int(page), count) if page.isdigit() and int(page) >= 1 else 1


@login_required
@require_http_methods(["GET", "POST"])
def document_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    document = _get_document_for_user(request, slug, pk, write=True)
    if request.method == "POST":
        delete_document(document)
        messages.success(request, _("Deleted “%(name)s” and its chunks.") % {"name": document.name})
        return redirect(document.kb)
    context = {"kb": document.kb, "document": document}
    return render(request, "knowledge/document_confirm_delete.html", context)


@login_required
@require_POST
def document_reingest(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    document = _get_document_for_user(request, slug, pk, write=True)
    request_reingest(document, enqueue=enqueue_ingestion)
    if request.htmx:  # a row's Retry: the row follows the ingestion over the page's socket
        return HttpResponse(status=204)
    messages.info(request, _("Re-ingesting “%(name)s”; its progress shows below.") % {"name": document.name})
    return redirect(document.kb)


@login_required
@require_POST
def document_restore(request: HttpRequest, slug: str, pk: int, version: int) -> HttpResponse:
    document = _get_document_for_user(request, slug, pk, write=True)
    try:
        outcome = restore_version(document, version, user=request.user, enqueue=enqueue_ingestion)
    except DocumentVersion.DoesNotExist:
        raise Http404("No such version of this document") from None
    if outcome.status == "queued":
        text = _("Restoring version %(version)s as version %(new_version)s.")
        messages.success(request, text % {"version": version, "new_version": outcome.document.version})
    else:
        text = _("Version %(version)s was not restored: %(reason)s.")
        messages.warning(request, text % {"version": version, "reason": outcome.message})
    return redirect(document)
