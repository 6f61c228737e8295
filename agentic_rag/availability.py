"""A database that cannot be reached is a 503, not a 500: the request did nothing and can be
sent again. Pages say so in words; the API says so in its JSON error shape."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext

RETRY_AFTER_S = 5
DATABASE_ERRORS = (OperationalError, InterfaceError)


class DatabaseUnavailableMiddleware:
    """Answer 503 with Retry-After when a view finds the database unreachable.

    Login checks read the user lazily inside the view, so this covers them too. The page
    is rendered without the request context: its processors would ask the database again."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        message = gettext("The database cannot be reached right now. Nothing was saved; try again in a few seconds.")
        if request.path.startswith("/api/"):
            body = {"error": {"message": message, "code": "database_unavailable"}}
            response: HttpResponse = JsonResponse(body, status=503)
        else:
            response = HttpResponse(render_to_string("503.html", {"message": message}), status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
