"""The production settings the deployment docs describe pass Django's deployment checks."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings


def test_check_deploy_is_clean_under_the_documented_production_settings(tmp_path):
    env = {
        **os.environ,
        "DEBUG": "false",
        "HTTPS": "true",
        "SECRET_KEY": "a-long-random-secret-key-for-the-check-" + "x" * 40,
        "ALLOWED_HOSTS": "rag.example.com",
        "VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "agentic_rag.settings",
    }
    env.pop("DATABASE_URL", None)

    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )

    assert check.returncode == 0, check.stdout + check.stderr
    assert "no issues" in check.stdout


def test_the_embedded_default_keeps_plain_http_cookies():
    assert not settings.SESSION_COOKIE_SECURE and not settings.SECURE_SSL_REDIRECT
