"""The page of a user's stated facts (semantic memory): list them, delete one, delete them all."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext, ngettext
from django.views.decorators.http import require_GET, require_POST

from .facts import forget_facts
from .models import UserFact

PAGE = "chat/facts.html"


def _facts_of(request: HttpRequest):
    return UserFact.objects.for_user(request.user).select_related("source_message__conversation")


def _get_fact_for_user(request: HttpRequest, pk: int) -> UserFact:
    return get_object_or_404(UserFact.objects.for_user(request.user), pk=pk)


def _list_or_redirect(request: HttpRequest, note: str) -> HttpResponse:
    if request.htmx:
        return render(request, f"{PAGE}#fact-list", {"facts": _facts_of(request), "note": note})
    messages.success(request, note)
    return redirect("chat-facts")


@login_required
@require_GET
def fact_list(request: HttpRequest) -> HttpResponse:
    return render(request, PAGE, {"facts": _facts_of(request)})


@login_required
@require_POST
def fact_delete(request: HttpRequest, pk: int) -> HttpResponse:
    fact = _get_fact_for_user(request, pk)
    forget_facts(UserFact.objects.filter(pk=fact.pk))
    return _list_or_redirect(request, gettext("Forgot “%(fact)s”.") % {"fact": fact.text})


@login_required
@require_POST
def fact_delete_all(request: HttpRequest) -> HttpResponse:
    count = forget_facts(UserFact.objects.for_user(request.user))
    note = ngettext("Forgot %(count)d fact.", "Forgot %(count)d facts.", count) % {"count": count}
    return _list_or_redirect(request, note)
