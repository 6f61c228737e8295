"""Settings for Agentic RAG; the environment is read here and nowhere else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

# Vector search is a memory-bound matrix-vector product per request: BLAS threads only
# contend with other requests and workers (measured 25x slower on a loaded 2-core
# machine), so each process runs BLAS on one thread unless OPENBLAS_NUM_THREADS says
# otherwise. Set before numpy loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def envbool(name: str, default: str) -> bool:
    return os.getenv(name, default).strip().lower() in {"1", "true", "yes", "on"}


def envbool_or_none(name: str) -> bool | None:
    """A yes/no setting that may be left unset (None: let someone else decide)."""
    value = os.getenv(name, "").strip()
    return envbool(name, "false") if value else None


def envint(name: str, default: str) -> int:
    return int(os.getenv(name, default))


def envfloat(name: str, default: str) -> float:
    return float(os.getenv(name, default))


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.getenv(name, default).split(",") if item.strip()]


DEBUG = envbool("DEBUG", "true")
# The default key only serves the embedded single-user default; the full stack sets SECRET_KEY.
SECRET_KEY = os.getenv("SECRET_KEY", "insecure-local-development-key-change-me")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
# HTTPS=true when the site is served over TLS (behind nginx, which sets X-Forwarded-Proto):
# secure cookies, HTTPS redirects and HSTS. Off by default: `make run` serves plain HTTP on
# 127.0.0.1, where secure cookies would never be sent back.
HTTPS = envbool("HTTPS", "false")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = LANGUAGE_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = int(os.getenv("SECURE_HSTS_SECONDS", "31536000")) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
# Asking browsers to preload HSTS commits the domain and every subdomain to HTTPS for months:
# the operator opts in (HSTS_PRELOAD=true); until then the check that suggests it is silenced.
SECURE_HSTS_PRELOAD = HTTPS and envbool("HSTS_PRELOAD", "false")
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_REFERRER_POLICY = "same-origin"
# Only the app's own scripts run: no inline script and no eval (agentic_rag/security.py says
# why each source is there). An empty CONTENT_SECURITY_POLICY sends no header.
CONTENT_SECURITY_POLICY = os.getenv(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self' ws: wss:; font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)

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
    # First, so that the time of every other middleware counts (REQUEST_WARN_S).
    "agentic_rag.watchdog.request_watchdog_middleware",
    "django.middleware.security.SecurityMiddleware",
    # Outside the middleware that can answer errors, so /api/ errors all leave in JSON.
    "agentic_rag.api_errors.ApiErrorShapeMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # After sessions, before common: the language comes from the switch's cookie, else
    # from the browser's Accept-Language.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "agentic_rag.availability.DatabaseUnavailableMiddleware",
    "agentic_rag.metrics.metrics_middleware",
    "agentic_rag.security.content_security_policy_middleware",
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
                "django.template.context_processors.i18n",
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
    # Tests run the chat pipeline and ingestion on worker threads: an in-memory shared-cache
    # database locks whole tables and fails at once ("database table is locked"), while a
    # file in WAL mode waits for the lock like production does.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.getenv("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "agentic_rag.channel_layers.RedisChannelLayer",
            # Each consumer waits on Redis in 5 s blocking pops; redis-py's default 5 s socket
            # timeout then fires on a reply that a busy event loop reads a moment late, and the
            # consumer dies (measured: 2-3 sockets of 200 under `bench load`).
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}]},
        }
    }
    CACHES = {
        "default": {
            # With Redis down, reads miss and writes are dropped (a warning is logged): pages,
            # login and the API still answer. Short timeouts, so a dead host costs little.
            "BACKEND": "agentic_rag.redis_cache.FailSoftRedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": envfloat("CACHE_TIMEOUT_S", "1"),
                        "socket_timeout": envfloat("CACHE_TIMEOUT_S", "1")},
        }
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
# Own queues for ingestion and embedding: re-embedding a KB can take hours, so it never
# holds up ingestion. `make worker` consumes all four.
CELERY_TASK_ROUTES = {
    "knowledge.tasks.ingest_document": {"queue": "ingestion"},
    "knowledge.tasks.upgrade_embeddings": {"queue": "embedding"},
    "knowledge.tasks.resume_embedding_upgrades": {"queue": "embedding"},
    "graphrag.tasks.build_knowledge_graph": {"queue": "graph"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Handing a task to a broker or result store that is down fails in about a second rather
# than after Celery's 20 retries (20 s): dispatch() then runs the task in-process instead.
CELERY_BROKER_CONNECTION_TIMEOUT = envfloat("CELERY_BROKER_CONNECTION_TIMEOUT", "2")
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    "retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
}
# A task whose worker died unacknowledged goes back to the queue after this long (Redis
# broker). Longer than any one ingestion or embedding batch, or it would run twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT_S", "3600")}
# The knowledge graph (graphrag): built after ingestion, debounced per KB (a burst of uploads
# makes one build); one build per KB at a time under a lock a live build keeps refreshing.
GRAPH_BUILD_AFTER_INGESTION = os.getenv("GRAPH_BUILD_AFTER_INGESTION", "1") == "1"
GRAPH_BUILD_DEBOUNCE_S = int(os.getenv("GRAPH_BUILD_DEBOUNCE_S", "10"))
GRAPH_BUILD_LOCK_S = int(os.getenv("GRAPH_BUILD_LOCK_S", "120"))
# One embedding upgrade per KB at a time, under a lock each batch renews (a batch takes seconds).
UPGRADE_LOCK_S = envint("UPGRADE_LOCK_S", "300")
# Shutdown (agentic_rag.shutdown): on SIGTERM, background work stops at its next batch
# boundary and resumes on the next start; a process that a stuck request thread still holds
# SHUTDOWN_GRACE_S later exits by force, before the SIGKILL of a container stop (docker waits
# 10 s by default) can land in the middle of a write.
SHUTDOWN_GRACE_S = envfloat("SHUTDOWN_GRACE_S", "5")
# Test-only: pause this long at each batch boundary of background work, so a test can stop
# a server while work is half done. Leave it 0.
BACKGROUND_BATCH_DELAY_S = envfloat("BACKGROUND_BATCH_DELAY_S", "0")
# Liveness of ingestion runs (knowledge.liveness). A run writes a heartbeat at its batch
# boundaries, at most every INGESTION_HEARTBEAT_S; one silent for INGESTION_STALE_S died with
# its process (a worker killed by SIGKILL or the OOM killer), and every server and worker
# process sweeps for such runs every INGESTION_SWEEP_S and queues them again, without waiting
# for the broker's visibility timeout. Parsing and chunking, which have no boundary inside,
# beat from a thread meanwhile, so a large file's parse is not taken for a dead run. A version
# whose runs die INGESTION_MAX_INTERRUPTIONS times fails instead of killing worker after worker.
INGESTION_STALE_S = envfloat("INGESTION_STALE_S", "60")
INGESTION_HEARTBEAT_S = envfloat("INGESTION_HEARTBEAT_S", str(INGESTION_STALE_S / 6))
INGESTION_SWEEP_S = envfloat("INGESTION_SWEEP_S", "10")
INGESTION_MAX_INTERRUPTIONS = envint("INGESTION_MAX_INTERRUPTIONS", "3")
# "auto": a language model extracts when one is configured, else the rules; "rules"; "llm".
GRAPH_EXTRACTOR = os.getenv("GRAPH_EXTRACTOR", "auto")
GRAPH_LLM_TIMEOUT_S = float(os.getenv("GRAPH_LLM_TIMEOUT_S", "30"))
# "louvain" (default: higher modularity and far faster than greedy on every graph measured)
# or "greedy" (networkx greedy modularity).
GRAPH_COMMUNITY_METHOD = os.getenv("GRAPH_COMMUNITY_METHOD", "louvain")
# Global search (graphrag.map_reduce): the question is mapped over the best
# GRAPH_GLOBAL_COMMUNITIES community reports, each model call given GRAPH_GLOBAL_MAP_TIMEOUT_S
# (a late or failed one is dropped; kept below CHAT_WORKER_TIMEOUT_S so the graph agent still
# answers in time), and the partial answers are reduced into one answer of at most
# GRAPH_GLOBAL_BUDGET_TOKENS tokens, the model's reduce given GRAPH_GLOBAL_REDUCE_TIMEOUT_S.
GRAPH_GLOBAL_COMMUNITIES = envint("GRAPH_GLOBAL_COMMUNITIES", "8")
GRAPH_GLOBAL_MAP_TIMEOUT_S = envfloat("GRAPH_GLOBAL_MAP_TIMEOUT_S", "3")
GRAPH_GLOBAL_BUDGET_TOKENS = envint("GRAPH_GLOBAL_BUDGET_TOKENS", "800")
GRAPH_GLOBAL_REDUCE_TIMEOUT_S = envfloat("GRAPH_GLOBAL_REDUCE_TIMEOUT_S", "15")
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
# The interface speaks one language at a time; English is the source, Chinese is
# translated in locale/. Documents and answers keep their own language.
LANGUAGES = [("en", "English"), ("zh-hans", "中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600  # the switch's choice outlives the browser session
LANGUAGE_COOKIE_SAMESITE = "Lax"
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
MAX_SECTION_EDIT_CHARS = envint("MAX_SECTION_EDIT_CHARS", "20000")  # document chat: one section's rewrite
# A document page renders about this many characters of text and pages through the rest, so
# its work is bounded whatever the document's size.
DOCUMENT_PAGE_CHARS = envint("DOCUMENT_PAGE_CHARS", "60000")
DOCUMENT_PAGE_PARENTS = envint("DOCUMENT_PAGE_PARENTS", "100")
DOCUMENT_OUTLINE_ITEMS = envint("DOCUMENT_OUTLINE_ITEMS", "300")  # past it: this page's sections and the chapters
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
FILE_UPLOAD_TEMP_DIR = None
# Request bodies (agentic_rag.body_limit) are refused with a 413 before Django reads them. The
# upload routes take one file at MAX_UPLOAD_MB with its multipart framing and room for a few
# smaller ones, and a file a little over MAX_UPLOAD_MB still reaches the view, which names it
# in its per-file refusal; 100 files at the cap in one request would not be a bound at all.
MAX_REQUEST_BODY_MB = envint("MAX_REQUEST_BODY_MB", str(2 * MAX_UPLOAD_MB))
MAX_REQUEST_BODY_BYTES = MAX_REQUEST_BODY_MB * 1024 * 1024
UPLOAD_URL_NAMES = frozenset({"knowledge-upload", "evaluation-set-import"})
# Every other route: Django's default for a body that is not files, now enforced up front.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", str(2_621_440))
# JSON bodies and websocket frames nested deeper than this are refused before parsing
# (agentic_rag.input_hygiene): json.loads recurses once per level.
JSON_MAX_DEPTH = envint("JSON_MAX_DEPTH", "32")
# Parsers (knowledge.parsing): bounds on the work one uploaded file can ask for, generous for
# real documents. A .docx's XML parts are inflated in bounded reads up to DOCX_MAX_EXPANDED_MB
# whatever the archive declares; its images and embedded files are never inflated.
DOCX_MAX_EXPANDED_MB = envint("DOCX_MAX_EXPANDED_MB", "64")
DOCX_MAX_PARAGRAPHS = envint("DOCX_MAX_PARAGRAPHS", "100000")
DOCX_MAX_TABLE_CELLS = envint("DOCX_MAX_TABLE_CELLS", "200000")
DOCX_MAX_ELEMENTS = envint("DOCX_MAX_ELEMENTS", "1000000")
PDF_MAX_PAGES = envint("PDF_MAX_PAGES", "2000")
HTML_MAX_ELEMENTS = envint("HTML_MAX_ELEMENTS", "200000")
# Requests still running after this many seconds are logged with their trace id and path
# (agentic_rag.watchdog), once while they run and once when they end.
REQUEST_WARN_S = envfloat("REQUEST_WARN_S", "5")

# Chunking (knowledge.chunking.ChunkingParams).
CHUNK_CHILD_TARGET_ZH = envint("CHUNK_CHILD_TARGET_ZH", "300")
CHUNK_CHILD_MAX_ZH = envint("CHUNK_CHILD_MAX_ZH", "400")
CHUNK_CHILD_TARGET_EN = envint("CHUNK_CHILD_TARGET_EN", "220")
CHUNK_CHILD_MAX_EN = envint("CHUNK_CHILD_MAX_EN", "300")
CHUNK_OVERLAP_SENTENCES = envint("CHUNK_OVERLAP_SENTENCES", "1")
CHUNK_PARENT_MAX_CHARS = envint("CHUNK_PARENT_MAX_CHARS", "4000")

# Embeddings (agentic_rag.embeddings). A knowledge base keeps the embedder that built it.
# Documents are embedded at ingestion by EMBEDDER, fast and dependency-free, so they are
# searchable at once; then a background task moves the KB's vectors to EMBEDDER_UPGRADE,
# the stronger but ~1000x slower multilingual-e5-small (measured: evaluation/probes).
# `manage.py reembed --kb SLUG` does the same in the foreground. An empty EMBEDDER_UPGRADE
# keeps EMBEDDER's vectors.
EMBEDDER = os.getenv("EMBEDDER", "hashing-1024")
EMBEDDER_UPGRADE = os.getenv("EMBEDDER_UPGRADE", "e5-small")
EMBEDDER_BATCH_SIZE = envint("EMBEDDER_BATCH_SIZE", "32")
EMBEDDER_THREADS = envint("EMBEDDER_THREADS", "0")
EMBEDDING_CACHE_TTL = envint("EMBEDDING_CACHE_TTL", "3600")
# The offline reader's multilingual sentence encoder: it encodes each document's sentences at
# ingestion and weighs them against the question when answering, so an English question can
# quote a Chinese sentence. Empty: the reader compares words and characters only.
READER_ENCODER = os.getenv("READER_ENCODER", "use-m3")
# A leg over the reader encoder's unit vectors, for a question in another language than (some
# of) the KB's text: it marks the fused chunks whose sentences mean what the question asks, and
# that cosine lets a passage in the other language past the evidence gate that counts shared
# words (chat.pipeline.stages.held_across_languages). "0" turns it off.
CROSSLINGUAL_LEG = envbool("CROSSLINGUAL_LEG", "1")
# An English question over Chinese text is also searched with its words' nearest words in the
# KB's own vocabulary under the reader's encoder ("temperature" → 温度; knowledge.lexicon).
# "0" turns it off.
LEXICON_EXPANSION = envbool("LEXICON_EXPANSION", "1")
# What that search counts for beside the question's own words when the KB also holds
# documents written in English (knowledge.lexicon.translate_question).
LEXICON_MIXED_WEIGHT = float(os.getenv("LEXICON_MIXED_WEIGHT", "0.5"))
# How many chunks the leg finds and fusion lacks are slotted into the ranking (knowledge.
# crosslingual.interleave). None by default: over technical text the encoder's similarities
# across languages are weak, and the chunks it slotted in displaced about as many right
# passages as they brought.
CROSSLINGUAL_SLOTS = int(os.getenv("CROSSLINGUAL_SLOTS", "0"))
# The embedded backend scans a large KB's vectors in this many shards at once (Python
# threads around single-threaded BLAS, which block instead of spinning when cores are
# busy); KBs under VECTOR_SCAN_PARALLEL_ROWS rows scan on the calling thread.
VECTOR_SCAN_THREADS = envint("VECTOR_SCAN_THREADS", str(min(4, os.cpu_count() or 1)))
VECTOR_SCAN_PARALLEL_ROWS = envint("VECTOR_SCAN_PARALLEL_ROWS", "32768")
# On PostgreSQL each process keeps the postings of the query terms it has read, per KB
# content version, up to this size (a term found in every row of 100k chunks takes 1.6 MB).
PG_POSTINGS_CACHE_MB = envint("PG_POSTINGS_CACHE_MB", "64")
# Threads per process, each with its own database connection, that run a hybrid query's
# vector leg while the keyword leg runs (0: one after the other on the caller's connection).
PG_SIDE_CONNECTIONS = envint("PG_SIDE_CONNECTIONS", "2")
OPENAI_EMBEDDINGS_BASE_URL = os.getenv("OPENAI_EMBEDDINGS_BASE_URL", "https://api.openai.com/v1")
OPENAI_EMBEDDINGS_API_KEY = os.getenv("OPENAI_EMBEDDINGS_API_KEY", "")
OPENAI_EMBEDDINGS_MODEL = os.getenv("OPENAI_EMBEDDINGS_MODEL", "text-embedding-3-small")
OPENAI_EMBEDDINGS_DIMS = envint("OPENAI_EMBEDDINGS_DIMS", "0")
OPENAI_EMBEDDINGS_TIMEOUT = envfloat("OPENAI_EMBEDDINGS_TIMEOUT", "30")

# Language models (agentic_rag.llm): providers tried in order, the offline extractive
# generator always last. With nothing configured, answers are extractive and say so.
LLM_PROVIDERS = envlist("LLM_PROVIDERS", "extractive")
OPENAI_BASE_URL = os.getenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
OPENAI_API_KEY = os.getenv("OPENAI_API_KEY", "")
OPENAI_MODEL = os.getenv("OPENAI_MODEL", "gpt-4o-mini")
LLM_CONNECT_TIMEOUT_S = envfloat("LLM_CONNECT_TIMEOUT_S", "5")
LLM_FIRST_TOKEN_TIMEOUT_S = envfloat("LLM_FIRST_TOKEN_TIMEOUT_S", "15")
LLM_CHUNK_TIMEOUT_S = envfloat("LLM_CHUNK_TIMEOUT_S", "30")
LLM_TIMEOUT_S = envfloat("LLM_TIMEOUT_S", "120")
LLM_BREAKER_FAILURE_RATE = envfloat("LLM_BREAKER_FAILURE_RATE", "0.10")
LLM_BREAKER_WINDOW_S = envfloat("LLM_BREAKER_WINDOW_S", "120")
LLM_BREAKER_MIN_CALLS = envint("LLM_BREAKER_MIN_CALLS", "5")
LLM_BREAKER_OPEN_S = envfloat("LLM_BREAKER_OPEN_S", "300")
LLM_PROBE_TIMEOUT_S = envfloat("LLM_PROBE_TIMEOUT_S", "5")
LLM_RETRY_MAX_ATTEMPTS = envint("LLM_RETRY_MAX_ATTEMPTS", "10")
LLM_RETRY_DEADLINE_S = envfloat("LLM_RETRY_DEADLINE_S", "30")
LLM_RETRY_MAX_RETRY_AFTER_S = envfloat("LLM_RETRY_MAX_RETRY_AFTER_S", "10")
# A chat request whose model failed (an error, a timeout, or no reply within a stage's hard
# budget) waits on models at most LLM_FAILOVER_S more, retries included, before the
# extractive reader answers; an answer stream silent for LLM_STALL_TIMEOUT_S mid-answer is
# finished by the reader. Slower models want both, and CHAT_STAGE_BUDGETS_MS, raised.
LLM_FAILOVER_S = envfloat("LLM_FAILOVER_S", "2")
LLM_STALL_TIMEOUT_S = envfloat("LLM_STALL_TIMEOUT_S", "1.5")
LLM_EXTRACTIVE_TOKENIZER = os.getenv("LLM_EXTRACTIVE_TOKENIZER", "knowledge.analysis.analyze")
LLM_EXTRACTIVE_EXPANDER = os.getenv("LLM_EXTRACTIVE_EXPANDER", "knowledge.fusion.expand_query")
# A model added on the settings page may read its key only from an environment variable whose
# whole name matches this, so no one can name SECRET_KEY or DATABASE_URL and send it out.
LLM_KEY_ENV_PATTERN = r"[A-Z][A-Z0-9_]*_API_KEY"

# Retrieval (knowledge.retrieval): longer queries are cut, with a warning in the result.
RETRIEVAL_MAX_QUERY_CHARS = envint("RETRIEVAL_MAX_QUERY_CHARS", "1000")
# A second rerank stage after the five-factor scorer, on its top 10: "llm" (an LLM judge,
# used only when LLM_PROVIDERS has a model), or an embedder name such as "e5-small" (a
# second embedding model's cosine). Empty: none. A KB's stored settings may name its own.
RERANK_SECOND_STAGE = os.getenv("RERANK_SECOND_STAGE", "")

# --- Chat (chat.pipeline) -------------------------------------------------------------
# The chat's switches are the defaults of ChatOptions (requests set only the KB and agent).
CHAT_MAX_MESSAGE_CHARS = envint("CHAT_MAX_MESSAGE_CHARS", "4000")
CHAT_ENABLE_QUERY_REWRITE = envbool("CHAT_ENABLE_QUERY_REWRITE", "true")
# Unset / empty: each KB's stored setting (rerank on and hybrid unless `evaluate --tune`
# chose otherwise for that KB); set, they override every KB.
CHAT_ENABLE_RERANK = envbool_or_none("CHAT_ENABLE_RERANK")
CHAT_TOP_K = envint("CHAT_TOP_K", "5")
# Chat runs of one process computing at once (0: no bound); the others wait their turn, and
# a run waiting on a language model lends its slot (agentic_rag.cpu_slots).
CHAT_CPU_SLOTS = envint("CHAT_CPU_SLOTS", str(2 * (os.cpu_count() or 1)))
CHAT_RERANK_TOP_K = envint("CHAT_RERANK_TOP_K", "5")
CHAT_MIN_CONFIDENCE_SCORE = envfloat("CHAT_MIN_CONFIDENCE_SCORE", "0.5")
# The answer gate: shortcut C unless one passage (its text and section title) holds at least
# this share of the question's terms (or of a cross-language variant's); 0 switches it off.
# On the docs answer set (evaluation/fixtures/docs-answers.json) the 6 questions not about
# the docs reach at most 0.33, the 50 about them at least 0.33 (one), 0.4 (the next), over
# hashing and e5-small vectors alike; 0.5 refused four English questions about Chinese
# passages. A cosine would not help: e5-small gives 0.85 to a recipe question.
CHAT_MIN_EVIDENCE_COVERAGE = envfloat("CHAT_MIN_EVIDENCE_COVERAGE", "0.35")
CHAT_SEARCH_MODE = os.getenv("CHAT_SEARCH_MODE", "")
CHAT_ENABLE_SOURCE_CITATION = envbool("CHAT_ENABLE_SOURCE_CITATION", "true")
# S1 loads the last N turns; S2 rewrites with the last 3 of them.
CHAT_HISTORY_TURNS = envint("CHAT_HISTORY_TURNS", "20")
CHAT_REWRITE_HISTORY_TURNS = envint("CHAT_REWRITE_HISTORY_TURNS", "3")
# Shortcut A: top intent confidence below this, or the top two closer than the gap.
CHAT_AMBIGUITY_MIN_CONFIDENCE = envfloat("CHAT_AMBIGUITY_MIN_CONFIDENCE", "0.7")
CHAT_AMBIGUITY_MIN_GAP = envfloat("CHAT_AMBIGUITY_MIN_GAP", "0.15")
# The Clarifier (chat.clarifier): the agents that ask when a question is ambiguous (a named
# document or chapter the KB lacks, two KBs equally likely, a pronoun with nothing before it),
# and the route-score gap under which two KBs count as equally likely. An empty list turns it off.
CHAT_CLARIFY_AGENTS = envlist("CHAT_CLARIFY_AGENTS", "plan_execute_agent")
CHAT_CLARIFY_KB_GAP = envfloat("CHAT_CLARIFY_KB_GAP", "0.02")
CHAT_MAX_ANSWER_TOKENS = envint("CHAT_MAX_ANSWER_TOKENS", "1024")
# LLM rewrites and intent classifications are cached (seconds).
CHAT_REWRITE_CACHE_TTL = envint("CHAT_REWRITE_CACHE_TTL", "3600")
CHAT_INTENT_CACHE_TTL = envint("CHAT_INTENT_CACHE_TTL", "3600")
# Hard stage budgets (ms) in place of the pipeline graph's own: "rewrite:1500,intent:1000".
# The defaults (rewrite 500, intent 350) suit a fast model; a slower one answers better with
# more time than with the stages' fallbacks.
CHAT_STAGE_BUDGETS_MS = {
    name.strip(): int(ms) for name, ms in (item.split(":", 1) for item in envlist("CHAT_STAGE_BUDGETS_MS", ""))
}
# Span input and output are cut to this many characters in stored traces.
CHAT_SPAN_MAX_CHARS = envint("CHAT_SPAN_MAX_CHARS", "2000")
# S6 tool channel: each tool call gets this long before it counts as failed (seconds).
CHAT_TOOL_TIMEOUT_S = envfloat("CHAT_TOOL_TIMEOUT_S", "5")
# The demo tools (weather, sales, ticket) answer from fixture files: off unless asked for, so a
# question about real weather or sales is never answered with made-up figures.
CHAT_DEMO_TOOLS = envbool("CHAT_DEMO_TOOLS", "false")
# Router (chat.routing_kb): with no KB chosen, route by content to the best readable KB
# scoring at least KB_ROUTE_MIN_SCORE; off, such questions take the general path.
KB_AUTO_ROUTE = envbool("KB_AUTO_ROUTE", "true")
KB_ROUTE_MIN_SCORE = envfloat("KB_ROUTE_MIN_SCORE", "0.15")
# Workers (chat.workers): each retrieval worker of a fan-out gets this long (seconds).
CHAT_WORKER_TIMEOUT_S = envfloat("CHAT_WORKER_TIMEOUT_S", "5")
# Agents (deep research, plan-execute, ReAct): each model call gets this long; after one
# fails, the rest of that run decides by rules.
CHAT_AGENT_MODEL_TIMEOUT_S = envfloat("CHAT_AGENT_MODEL_TIMEOUT_S", "10")
# Per-node timeouts (seconds) of everything in a chat run that can wait, in one place; the
# runner (chat.pipeline.timeouts) enforces them and each node degrades as the graph declares:
# memory → no history, rewrite → the original query, intent → the default KB intent, search
# (the KB's workers and agents, the graph agent) → the tools' results alone, retrieve (search
# and tools together) → "not found", generate → what streamed so far or the extractive reader,
# verify → citations shown unverified. Override some as "search:10,generate:60". The seed (S1
# §9.3) asks for a timeout per node without numbers: these leave a slow model's agent rounds
# (CHAT_AGENT_MODEL_TIMEOUT_S each) room, and bound what would otherwise wait forever.
CHAT_NODE_TIMEOUTS_S = {
    "memory": 5.0,
    "rewrite": 0.5,  # CHAT_STAGE_BUDGETS_MS, when it names the node, wins (in milliseconds)
    "intent": 0.35,
    "search": 45.0,
    "tools": CHAT_TOOL_TIMEOUT_S,
    "workers": CHAT_WORKER_TIMEOUT_S,
    "agent_model": CHAT_AGENT_MODEL_TIMEOUT_S,
    "retrieve": 60.0,
    "generate": LLM_TIMEOUT_S,
    "verify": 2.0,
} | {name.strip(): float(s) for name, s in (item.split(":", 1) for item in envlist("CHAT_NODE_TIMEOUTS_S", ""))}
# The older names read the same entries, so an override here reaches their callers too.
CHAT_TOOL_TIMEOUT_S = CHAT_NODE_TIMEOUTS_S["tools"]
CHAT_WORKER_TIMEOUT_S = CHAT_NODE_TIMEOUTS_S["workers"]
CHAT_AGENT_MODEL_TIMEOUT_S = CHAT_NODE_TIMEOUTS_S["agent_model"]
# Retrieval results (knowledge.result_cache) are cached per (KB, its content and graph version,
# query, every parameter): at most RETRIEVAL_CACHE_ENTRIES in each process (0: no cache), and
# in the Django cache too when it is shared (Redis), for RETRIEVAL_CACHE_TTL_S seconds. An entry
# keeps the whole result, legs included: 100-130 KB on the docs KB, so 128 take about 15 MB.
RETRIEVAL_CACHE_ENTRIES = envint("RETRIEVAL_CACHE_ENTRIES", "128")
RETRIEVAL_CACHE_TTL_S = envint("RETRIEVAL_CACHE_TTL_S", "3600")
# Rate limits of /api/chat, /api/chat/stream, the send view and the websocket (requests per
# second; 0 switches a level off): a global token bucket, sliding windows per user and session.
RATE_LIMIT_GLOBAL_QPS = envint("RATE_LIMIT_GLOBAL_QPS", "1000")
RATE_LIMIT_USER_QPS = envint("RATE_LIMIT_USER_QPS", "10")
RATE_LIMIT_SESSION_QPS = envint("RATE_LIMIT_SESSION_QPS", "5")
# Memory (chat.memory): past CHAT_SUMMARY_TURNS unsummarised turns, the oldest
# CHAT_SUMMARY_SHARE of them are summarised; past exchanges are recalled when at least
# CHAT_MEMORY_MIN_SIMILARITY alike (cosine), CHAT_MEMORY_K at most.
CHAT_SUMMARY_TURNS = envint("CHAT_SUMMARY_TURNS", "20")
CHAT_SUMMARY_SHARE = envfloat("CHAT_SUMMARY_SHARE", "0.6")
CHAT_MEMORY_K = envint("CHAT_MEMORY_K", "3")
CHAT_MEMORY_MIN_SIMILARITY = envfloat("CHAT_MEMORY_MIN_SIMILARITY", "0.5")
CHAT_MEMORY_SCAN = envint("CHAT_MEMORY_SCAN", "2000")
# Semantic memory (chat.facts): the lasting facts a user states ("we use PostgreSQL 15") are
# kept per user, CHAT_FACTS_MAX at most (the oldest go); a question recalls CHAT_FACT_K at
# most, those holding CHAT_FACT_MIN_OVERLAP of its words (more than a verb like "use") or
# CHAT_FACT_MIN_SIMILARITY alike by the embedder (cosine).
CHAT_FACTS_MAX = envint("CHAT_FACTS_MAX", "200")
CHAT_FACT_K = envint("CHAT_FACT_K", "3")
CHAT_FACT_MIN_OVERLAP = envfloat("CHAT_FACT_MIN_OVERLAP", "0.3")
CHAT_FACT_MIN_SIMILARITY = envfloat("CHAT_FACT_MIN_SIMILARITY", "0.75")
# Facts are found by the model once, within CHAT_FACT_MODEL_TIMEOUT_S and without retries or
# failover: the rules find them when the model fails, and a dead model must not hold a worker
# (or, with BACKGROUND_TASKS=inline, the request) for its whole retry deadline.
CHAT_FACT_MODEL_TIMEOUT_S = envfloat("CHAT_FACT_MODEL_TIMEOUT_S", "4")
# External MCP servers whose tools join the tool channel, as JSON: a list of
# {"name", "command", "args"?, "env"?} (stdio) or {"name", "url"} (Streamable HTTP).
MCP_SERVERS = json.loads(os.getenv("MCP_SERVERS", "[]"))
# Web search (chat.web): a source of DeepSearch and the web_search tool. Off unless a provider
# is named here or on the Language models page (whose saved settings replace these).
# WEB_SEARCH_PROVIDER: "searxng" (self-hosted, WEB_SEARCH_URL its base, JSON output on) or
# "brave" (its key read from the variable WEB_SEARCH_API_KEY_ENV names, a *_API_KEY name).
WEB_SEARCH_PROVIDER = os.getenv("WEB_SEARCH_PROVIDER", "").strip().lower()
WEB_SEARCH_URL = os.getenv("WEB_SEARCH_URL", "").strip()
WEB_SEARCH_API_KEY_ENV = os.getenv("WEB_SEARCH_API_KEY_ENV", "")
# Results and redirects only from these domains (empty: any), never from the denied ones.
WEB_SEARCH_ALLOW_DOMAINS = envlist("WEB_SEARCH_ALLOW_DOMAINS", "")
WEB_SEARCH_DENY_DOMAINS = envlist("WEB_SEARCH_DENY_DOMAINS", "")
# Inside hosts or networks ("searxng", "10.0.0.0/8", "127.0.0.1") a fetch may reach; every
# other loopback, private or link-local address is refused (WEB_SEARCH_URL's host may be
# asked for results, but a result page there is refused unless listed here too).
WEB_FETCH_ALLOW_HOSTS = envlist("WEB_FETCH_ALLOW_HOSTS", "")
WEB_SEARCH_MAX_RESULTS = envint("WEB_SEARCH_MAX_RESULTS", "5")
WEB_SEARCH_PAGES = envint("WEB_SEARCH_PAGES", "3")  # result pages fetched per query
WEB_SEARCH_CONNECT_TIMEOUT_S = envfloat("WEB_SEARCH_CONNECT_TIMEOUT_S", "3")
WEB_SEARCH_READ_TIMEOUT_S = envfloat("WEB_SEARCH_READ_TIMEOUT_S", "5")
WEB_SEARCH_TOTAL_TIMEOUT_S = envfloat("WEB_SEARCH_TOTAL_TIMEOUT_S", "6")  # one query, pages included
WEB_SEARCH_MAX_RESPONSE_BYTES = envint("WEB_SEARCH_MAX_RESPONSE_BYTES", "4000000")
WEB_FETCH_MAX_BYTES = envint("WEB_FETCH_MAX_BYTES", "2000000")
WEB_FETCH_MAX_REDIRECTS = envint("WEB_FETCH_MAX_REDIRECTS", "3")
# --- end of Chat ------------------------------------------------------------------------

# Demo content created by `manage.py setup_demo` (make run).
DEMO_USERNAME = os.getenv("DEMO_USERNAME", "demo")
DEMO_PASSWORD = os.getenv("DEMO_PASSWORD", "demo-password")

LOG_LEVEL = os.getenv("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(trace_id)s] %(message)s"}},
    # The chat request's trace id (agentic_rag.tracing) on every line; "-" outside a request.
    "filters": {"trace_id": {"()": "agentic_rag.tracing.TraceIdFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["trace_id"]}
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"jieba": {"level": "WARNING"}},
}
