"""The graph explorer of a knowledge base: the page, its nodes and links as JSON, one entity's detail."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from knowledge.models import KnowledgeBase
from knowledge.views import _get_kb_for_user

from .explorer import entity_context, graph_batch, page_context, search_entities
from .forms import GraphDataForm, SearchForm
from .models import Entity

PAGE = "graphrag/explorer.html"


@login_required
@require_GET
def graph_explorer(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    form = SearchForm(request.GET)
    text = form.cleaned_data["q"] if form.is_valid() else ""
    context = {"kb": kb, "q": text, "results": search_entities(kb, text)}
    return _render(request, kb, "search-results", context)


@login_required
@require_GET
def graph_data(request: HttpRequest, slug: str) -> JsonResponse:
    kb = _get_kb_for_user(request, slug)
    form = GraphDataForm(request.GET)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    return JsonResponse(graph_batch(kb, form.query()))


@login_required
@require_GET
def graph_entity(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    entities = Entity.objects.filter(kb=kb).select_related("community").defer("embedding")
    entity = get_object_or_404(entities, pk=pk)
    return _render(request, kb, "entity-detail", {"kb": kb, **entity_context(entity)})


def _render(request: HttpRequest, kb: KnowledgeBase, partial: str, context: dict) -> HttpResponse:
    """Render the partial for htmx and the whole page otherwise."""
    if request.htmx:
        response = render(request, f"{PAGE}#{partial}", context)
    else:
        response = render(request, PAGE, {**page_context(kb), **context})
    # One URL, two bodies: a cache or the back button must not serve one for the other.
    patch_vary_headers(response, ["HX-Request"])
    return response
