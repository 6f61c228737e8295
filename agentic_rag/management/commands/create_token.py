"""manage.py create_token USERNAME [--name NAME]: print a new API key once."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentic_rag.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for a user and print its key; the key is not stored."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a label to tell tokens apart")

    def handle(self, *args, **options) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist as error:
            raise CommandError(f"No user named {options['username']!r}.") from error
        token, key = ApiToken.issue(user, options["name"])
        self.stderr.write(f"Token {token.name!r} for {options['username']}; the key is shown once:")
        self.stdout.write(key)
