"""Settings for Agentic RAG; the environment is read here and nowhere else."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    return os.getenv(name, default).strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: str) -> int:
    return int(os.getenv(name, default))


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.getenv(name, default).split(",") if item.strip()]


DEBUG = envbool("DEBUG", "true")
# The default key only serves the embedded single-user default; the full stack sets SECRET_KEY.
SECRET_KEY = os.getenv("SECRET_KEY", "insecure-local-development-key-change-me")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "agentic_rag",
    "knowledge",
    "graphrag",
    "chat",
    "evaluation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "agentic_rag.urls"
ASGI_APPLICATION = "agentic_rag.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

VAR_DIR = Path(os.getenv("VAR_DIR", str(BASE_DIR / "var")))
# SQLite cannot create the folder of its file, and WhiteNoise warns about a missing
# STATIC_ROOT, so both exist from the first command on a fresh clone.
(VAR_DIR / "staticfiles").mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": dj_database_url.parse(
        os.getenv("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", "0"),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the background ingestion thread write while requests read;
    # IMMEDIATE transactions plus a timeout queue writers instead of failing them.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.getenv("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: a broker when REDIS_URL (or CELERY_BROKER_URL) is set; otherwise tasks run
# in-process on a background thread so no request waits for them.
CELERY_BROKER_URL = os.getenv("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = os.getenv("CELERY_RESULT_BACKEND", REDIS_URL) or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {"knowledge.tasks.*": {"queue": "ingestion"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# "celery" sends tasks to the broker, "thread" runs them in-process in the background,
# "inline" runs them at once in the caller (tests, management commands).
BACKGROUND_TASKS = os.getenv("BACKGROUND_TASKS", "celery" if CELERY_BROKER_URL else "thread")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "knowledge-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
TIME_ZONE = os.getenv("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Uploads: files above MAX_UPLOAD_MB are refused before they are read into memory.
MAX_UPLOAD_MB = envint("MAX_UPLOAD_MB", "50")
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 1024 * 1024
MAX_UPLOAD_FILES = envint("MAX_UPLOAD_FILES", "100")
DATA_UPLOAD_MAX_NUMBER_FILES = MAX_UPLOAD_FILES
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
FILE_UPLOAD_TEMP_DIR = None

# Chunking (knowledge.chunking.ChunkingParams).
CHUNK_CHILD_TARGET_ZH = envint("CHUNK_CHILD_TARGET_ZH", "300")
CHUNK_CHILD_MAX_ZH = envint("CHUNK_CHILD_MAX_ZH", "400")
CHUNK_CHILD_TARGET_EN = envint("CHUNK_CHILD_TARGET_EN", "220")
CHUNK_CHILD_MAX_EN = envint("CHUNK_CHILD_MAX_EN", "300")
CHUNK_OVERLAP_SENTENCES = envint("CHUNK_OVERLAP_SENTENCES", "1")
CHUNK_PARENT_MAX_CHARS = envint("CHUNK_PARENT_MAX_CHARS", "4000")

# Demo content created by `manage.py setup_demo` (make run).
DEMO_USERNAME = os.getenv("DEMO_USERNAME", "demo")
DEMO_PASSWORD = os.getenv("DEMO_PASSWORD", "demo-password")

LOG_LEVEL = os.getenv("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"jieba": {"level": "WARNING"}},
}
