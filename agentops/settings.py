"""Django settings for AgentOps, read from the environment (see README "Configuration").

- ``DATABASE_URL``: unset means the embedded default, an SQLite file under ``var/``
  in WAL mode with a busy timeout so several worker processes can share it.
- ``REDIS_URL``: set means RQ dispatch through django-rq; unset means workers claim due
  steps straight from the database.
- ``AGENTOPS_*``: engine knobs (lease length in seconds, sweeper interval, ...).
"""

from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from agentops.env import (
    env_bool,
    env_choice,
    env_database_url,
    env_dotted_path,
    env_json,
    env_number,
    env_rate_limits,
    env_redis_url,
    env_str,
    signal_hooks,
)
from agentops.links import bounded_redis_url, pg_link_options
from agentops.log_format import TerminalSafeFormatter
from runs.engine import durations

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("AGENTOPS_VAR_DIR", str(BASE_DIR / "var")))

SECRET_KEY = env_str("SECRET_KEY", "agentops-insecure-dev-key-change-me-in-production")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = (env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver") or "").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_filters",
    "django_rq",
    "runs",
    "approvals",
    "apitokens",
]
# The lab (lab/: the simulator, its `sim` model and workflows, fault flags, drills, soak,
# bench, the demo) is for development and tests: on by default so a fresh checkout's
# `make demo` works; a production deployment turns it off (docs/deploy.md).
AGENTOPS_LAB = env_bool("AGENTOPS_LAB", True)
if AGENTOPS_LAB:
    # Before "runs": its model provider, workflows and fault hooks are registered when
    # the runs app checks the models and workflows at start-up.
    INSTALLED_APPS.insert(INSTALLED_APPS.index("runs"), "lab")

MIDDLEWARE = [
    # Outermost: every error under /api/ is the API's JSON error body.
    "runs.api.middleware.ApiJsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.api.middleware.ApiBodyLimitMiddleware",
    "agentops.middleware.DatabaseBusyMiddleware",
    "agentops.middleware.InvalidValueMiddleware",
    # Innermost: records refused (403/409) actions with the reason the view gave.
    "runs.refusals.RefusalAuditMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"
ASGI_APPLICATION = "agentops.asgi.application"

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

# WAL lets readers run beside the one writer; IMMEDIATE takes the write lock at BEGIN so
# two workers never deadlock upgrading a read lock; a lock wait of up to 30 s stays a wait
# inside SQLite instead of reaching a step as "database is locked" (past it, a worker
# retries its transaction). Applied to every SQLite database, whether embedded or named
# in DATABASE_URL.
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": env_number("AGENTOPS_SQLITE_BUSY_SECONDS", 30, minimum=0),
}

# Persistent connections (no per-step connection setup), health-checked so a worker
# survives a database restart. The ASGI server sets AGENTOPS_CONN_MAX_AGE=0
# (agentops/asgi.py): under ASGI each request may run in another thread, so a kept
# connection would be held by a thread nobody reuses.
_database = env_database_url(
    "DATABASE_URL",
    conn_max_age=int(env_number("AGENTOPS_CONN_MAX_AGE", 600, minimum=0)),
    conn_health_checks=True,
)
if _database:
    DATABASES = {"default": _database}
else:
    _sqlite_path = env_str("AGENTOPS_SQLITE_PATH", str(VAR_DIR / "agentops.sqlite3"))
    # The embedded default must work on a fresh checkout with no setup step.
    try:
        Path(_sqlite_path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"AGENTOPS_SQLITE_PATH / AGENTOPS_VAR_DIR: cannot create the directory of "
            f"{_sqlite_path}: {exc.strerror}"
        ) from None
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _sqlite_path,
            "TEST": {"NAME": str(VAR_DIR / "test-agentops.sqlite3")},
        }
    }
# A PostgreSQL link cut without a reset (packets dropped) must not hold a call for the
# minutes of the kernel's TCP timers: keepalives end an idle connection to a vanished
# peer, tcp_user_timeout one whose data stays unacknowledged, connect_timeout a
# connection attempt (agentops/links.py; docs/deploy.md gives the server's side).
PG_LINK_OPTIONS = pg_link_options(
    keepalive_idle=env_number("AGENTOPS_DB_KEEPALIVE_SECONDS", 5, minimum=1),
    user_timeout=env_number("AGENTOPS_DB_USER_TIMEOUT", 10, minimum=1),
    connect_timeout=env_number("AGENTOPS_DB_CONNECT_TIMEOUT", 5, minimum=2),
)
for _db in DATABASES.values():
    if _db["ENGINE"] == "django.db.backends.sqlite3":
        _db["OPTIONS"] = {**SQLITE_OPTIONS, **_db.get("OPTIONS", {})}
    elif _db["ENGINE"] == "django.db.backends.postgresql":
        _db["OPTIONS"] = {**PG_LINK_OPTIONS, **_db.get("OPTIONS", {})}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL")
# Every Redis call (RQ's own heartbeat and bookkeeping, notifications, /readyz) gives up
# after these many seconds: a worker cut off from Redis falls back to database polling
# instead of waiting for the kernel's TCP timers.
AGENTOPS_REDIS_TIMEOUT = env_number("AGENTOPS_REDIS_TIMEOUT", 5, minimum=1)
AGENTOPS_REDIS_CONNECT_TIMEOUT = env_number("AGENTOPS_REDIS_CONNECT_TIMEOUT", 3, minimum=0.5)
# The partition drill's cuts (seconds): Redis from a worker running a step from RQ, then
# PostgreSQL from a worker in the middle of a step (docs/drills-and-bench.md).
AGENTOPS_PARTITION_REDIS_SECONDS = env_number("AGENTOPS_PARTITION_REDIS_SECONDS", 75, minimum=5)
AGENTOPS_PARTITION_PG_SECONDS = env_number("AGENTOPS_PARTITION_PG_SECONDS", 40, minimum=5)


RQ_QUEUES = {
    "default": {
        "URL": bounded_redis_url(
            REDIS_URL or "redis://127.0.0.1:6379/0",
            timeout=AGENTOPS_REDIS_TIMEOUT,
            connect_timeout=AGENTOPS_REDIS_CONNECT_TIMEOUT,
        ),
        "DEFAULT_TIMEOUT": 3600,
    },
}
# Without Redis, dispatch runs from the database: django-rq's admin dashboard would only
# fail to reach a Redis nobody configured, so it is not registered at all.
RQ_SHOW_ADMIN_LINK = REDIS_URL is not None

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Browser security headers on every page (console, admin, login). Scripts and styles
# come only from this origin, nothing inline (htmx's own indicator <style> is turned off
# in base.html and lives in console.css), no plugins, no framing, forms post here only.
# The browsable API docs load Swagger UI from a CDN with an inline script: excluded.
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/api/v1/docs"],
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

STATIC_URL = "static/"
# `manage.py collectstatic` copies the console's assets here for the web server.
STATIC_ROOT = Path(env_str("AGENTOPS_STATIC_ROOT", str(VAR_DIR / "static")))
MEDIA_ROOT = Path(env_str("AGENTOPS_MEDIA_ROOT", str(VAR_DIR / "artifacts")))
MEDIA_URL = "media/"

# Engine knobs, all in seconds unless named otherwise.
AGENTOPS_LEASE_SECONDS = env_number("AGENTOPS_LEASE_SECONDS", 30, minimum=1)
AGENTOPS_POLL_SECONDS = env_number("AGENTOPS_POLL_SECONDS", 0.5, minimum=0.01)
# Execution slots of a worker process (steps run at once, each in a slot thread) and, on
# PostgreSQL, the connection pool those slots share (runs/engine/execution/slots.py).
AGENTOPS_WORKER_CONCURRENCY = int(env_number("AGENTOPS_WORKER_CONCURRENCY", 8, minimum=1))
AGENTOPS_WORKER_POOL_SIZE = int(env_number("AGENTOPS_WORKER_POOL_SIZE", 4, minimum=1))
# The newest bytes of each attempt's captured log (logging records, stdout, stderr) kept
# with the attempt (runs/engine/execution/attempt_logs.py).
AGENTOPS_ATTEMPT_LOG_BYTES = int(env_number("AGENTOPS_ATTEMPT_LOG_BYTES", 65536, minimum=1024))
AGENTOPS_SWEEP_SECONDS = env_number("AGENTOPS_SWEEP_SECONDS", 5, minimum=0.1)
AGENTOPS_RENOTIFY_SECONDS = env_number("AGENTOPS_RENOTIFY_SECONDS", 15, minimum=0.1)
AGENTOPS_SWEEP_BATCH = int(env_number("AGENTOPS_SWEEP_BATCH", 200, minimum=1))
AGENTOPS_STUCK_SECONDS = env_number("AGENTOPS_STUCK_SECONDS", 600, minimum=1)
# Schedules (runs/engine/control/schedules.py): a tick handled later than this after its
# time counts as missed and follows the schedule's catch-up policy.
AGENTOPS_SCHEDULE_GRACE_SECONDS = env_number("AGENTOPS_SCHEDULE_GRACE_SECONDS", 5, minimum=0.1)
# Signal webhooks (docs/waits.md): {"NAME": {"secret": str, "signal": str, "field": str,
# "by": "thread"|"run", "payload_field"?: str, "request_id_field"?: str}}; calls are
# signed with HMAC-SHA256 over "<timestamp>.<body>", refused when older than the
# tolerance (seconds).
AGENTOPS_SIGNAL_HOOKS = signal_hooks(env_json("AGENTOPS_SIGNAL_HOOKS", {}))
AGENTOPS_HOOK_TOLERANCE_SECONDS = env_number("AGENTOPS_HOOK_TOLERANCE_SECONDS", 300, minimum=1)
# An operator's "check the outside world now" waits at most this long (seconds) on a
# tool's verify hook (its own timeout when shorter): no step deadline bounds it.
AGENTOPS_VERIFY_SECONDS = env_number("AGENTOPS_VERIFY_SECONDS", 30, minimum=0.1)
# Worker liveness (runs/engine/execution/liveness.py): workers learn that a step's owner
# died from a PostgreSQL session lock (or its pid on SQLite) and re-claim its step within
# about AGENTOPS_LIVENESS_SECONDS instead of waiting for the lease. Off: the lease decides.
AGENTOPS_LIVENESS = env_bool("AGENTOPS_LIVENESS", True)
AGENTOPS_LIVENESS_SECONDS = env_number("AGENTOPS_LIVENESS_SECONDS", 0.5, minimum=0.05)
# A server restart drops every session lock at once, the live workers' too: for this many
# seconds after PostgreSQL starts, a worker that started before it is not judged by its
# lock (the lease decides) while the live ones reconnect and take their locks again.
AGENTOPS_LIVENESS_GRACE_SECONDS = env_number("AGENTOPS_LIVENESS_GRACE_SECONDS", 15, minimum=0)
# Client API (docs/api.md): request body limit in bytes (413 above it), run creations
# allowed per token per period (429 above it), SSE poll and heartbeat intervals in
# seconds, and the bearer token /metrics requires (unset: /metrics answers 403).
# 8 x the engine's largest value (runs.engine.rules.MAX_VALUE_BYTES): a value the rule
# takes fits even with every character escaped as \uXXXX.
AGENTOPS_API_MAX_BODY_BYTES = int(env_number("AGENTOPS_API_MAX_BODY_BYTES", 524288, minimum=1024))
AGENTOPS_API_CREATE_LIMIT = int(env_number("AGENTOPS_API_CREATE_LIMIT", 60, minimum=1))
AGENTOPS_API_CREATE_PERIOD = env_number("AGENTOPS_API_CREATE_PERIOD", 60, minimum=1)
AGENTOPS_SSE_POLL_SECONDS = env_number("AGENTOPS_SSE_POLL_SECONDS", 0.5, minimum=0.05)
AGENTOPS_SSE_HEARTBEAT_SECONDS = env_number("AGENTOPS_SSE_HEARTBEAT_SECONDS", 15, minimum=0.1)
AGENTOPS_METRICS_TOKEN = env_str("AGENTOPS_METRICS_TOKEN") or None
# Seconds the simulated model waits between the words of a streamed reply (demo pacing).
AGENTOPS_SIM_WORD_SECONDS = env_number("AGENTOPS_SIM_WORD_SECONDS", 0, minimum=0)
#: Redis database (on the configured server) that drills, the soak and the benchmark use.
AGENTOPS_SCRATCH_REDIS_DB = int(env_number("AGENTOPS_SCRATCH_REDIS_DB", 15, minimum=0))
#: Console: a step name run this many times in one generation counts as a loop.
AGENTOPS_LOOP_REPEATS = int(env_number("AGENTOPS_LOOP_REPEATS", 5, minimum=2))
#: Console: a pending approval older than this (seconds) with no expiry is overdue.
AGENTOPS_APPROVAL_OVERDUE_SECONDS = env_number("AGENTOPS_APPROVAL_OVERDUE_SECONDS", 3600, minimum=1)
#: Console: serve /static/ from Django itself (the console's only assets are htmx and
#: one stylesheet); turn off when a web server serves STATIC_ROOT.
AGENTOPS_SERVE_STATIC = env_bool("AGENTOPS_SERVE_STATIC", True)
#: Default lifetime of an approval request; 0 means approvals never expire. An approval
#: step's ``expires_after`` overrides it.
AGENTOPS_APPROVAL_EXPIRY_SECONDS = env_number(
    "AGENTOPS_APPROVAL_EXPIRY_SECONDS", 0, minimum=0, maximum=durations.MAX_SECONDS
)
#: Approval policy (approvals/policy.py): workflows whose runs their own starter may
#: approve (comma-separated names; empty: none, the four-eyes default), and whether a
#: superuser may decide without holding the approver role.
AGENTOPS_SELF_APPROVAL_WORKFLOWS = frozenset(
    name.strip()
    for name in (env_str("AGENTOPS_SELF_APPROVAL_WORKFLOWS", "") or "").split(",")
    if name.strip()
)
AGENTOPS_SUPERUSER_DECIDES = env_bool("AGENTOPS_SUPERUSER_DECIDES", False)
AGENTOPS_DEVICE_DIR = Path(env_str("AGENTOPS_DEVICE_DIR", str(VAR_DIR / "devices")))
#: Simulated devices keep only this many newest calls in their log.
AGENTOPS_SIM_CALL_LOG_MAX = int(env_number("AGENTOPS_SIM_CALL_LOG_MAX", 1000, minimum=10))
# Context assembly (docs/data-safety.md): summarise older history once the part not yet
# covered by a summary counts more than this many tokens, keeping the newest
# AGENTOPS_CONTEXT_RECENT_MESSAGES messages in full; tokens by AGENTOPS_TOKEN_COUNTER.
AGENTOPS_CONTEXT_SUMMARY_TOKENS = int(
    env_number("AGENTOPS_CONTEXT_SUMMARY_TOKENS", 2000, minimum=1)
)
AGENTOPS_CONTEXT_RECENT_MESSAGES = int(
    env_number("AGENTOPS_CONTEXT_RECENT_MESSAGES", 20, minimum=1)
)
AGENTOPS_TOKEN_COUNTER = env_dotted_path(
    "AGENTOPS_TOKEN_COUNTER", "runs.engine.data.model_input.count_tokens"
)
# Artifact files no row refers to are deleted by `artifacts check --repair` only when
# older than this (a worker may be between writing a file and committing its row).
AGENTOPS_ORPHAN_GRACE_SECONDS = env_number("AGENTOPS_ORPHAN_GRACE_SECONDS", 3600, minimum=0)
# PostgreSQL lock_timeout and statement_timeout per process kind, in seconds (0 = no
# limit; agentops/db_session.py): a web request gives up early and answers 503, a worker
# waits longer and retries its transaction, command-line tools run unbounded.
AGENTOPS_DB_TIMEOUTS = {
    "web": (
        env_number("AGENTOPS_WEB_LOCK_TIMEOUT", 5, minimum=0),
        env_number("AGENTOPS_WEB_STATEMENT_TIMEOUT", 30, minimum=0),
    ),
    "worker": (
        env_number("AGENTOPS_WORKER_LOCK_TIMEOUT", 10, minimum=0),
        env_number("AGENTOPS_WORKER_STATEMENT_TIMEOUT", 60, minimum=0),
    ),
    "cli": (
        env_number("AGENTOPS_CLI_LOCK_TIMEOUT", 30, minimum=0),
        env_number("AGENTOPS_CLI_STATEMENT_TIMEOUT", 0, minimum=0),
    ),
}
# Directory of pg_dump / pg_restore for `backup` / `restore` (default: PATH, then the
# newest /usr/lib/postgresql/*/bin).
AGENTOPS_PG_BIN = env_str("AGENTOPS_PG_BIN", "")

# Production over HTTPS behind a proxy (docs/deploy.md): AGENTOPS_HTTPS=1 marks the
# session and CSRF cookies Secure and redirects plain HTTP (except the health checks,
# which probes call on loopback); HSTS is off until AGENTOPS_HSTS_SECONDS says how long
# browsers must remember it. The proxy's X-Forwarded-Proto reaches Django through
# uvicorn's --proxy-headers (trusted from --forwarded-allow-ips only).
AGENTOPS_HTTPS = env_bool("AGENTOPS_HTTPS", False)
SESSION_COOKIE_SECURE = AGENTOPS_HTTPS
CSRF_COOKIE_SECURE = AGENTOPS_HTTPS
SECURE_SSL_REDIRECT = AGENTOPS_HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_HSTS_SECONDS = int(env_number("AGENTOPS_HSTS_SECONDS", 0, minimum=0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTOPS_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("AGENTOPS_HSTS_PRELOAD", False)
# Origins (https://console.example.com) allowed to POST forms, when not the Host itself.
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

# AGENTOPS_LOG_FORMAT=json: one JSON object per log line (for a log shipper).
AGENTOPS_LOG_FORMAT = env_choice("AGENTOPS_LOG_FORMAT", "plain", ["plain", "json"])
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        # Untrusted text in a record (a tool's error, a model's reply) comes out escaped.
        "plain": {
            "()": TerminalSafeFormatter,
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": AGENTOPS_LOG_FORMAT}},
    # Every record goes through the one console handler on the root logger, so a
    # library's warning (whose text may quote a tool's output) is escaped as ours are.
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "agentops": {
            "level": env_choice(
                "AGENTOPS_LOG_LEVEL", "WARNING", ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
            ),
        },
        # Unhandled request errors (500s) with their tracebacks; a 4xx is the client's
        # answer, not a log line.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# Model providers (runs/agents, README "Bring your own agent"): the default model, named
# the Pydantic AI way ("openai:gpt-4.1-mini", "anthropic:...") or by a registered name;
# empty: the default an installed app registers (the lab's offline "sim"). A workflow or
# a step may name another. OPENAI_BASE_URL points the openai provider at any
# OpenAI-compatible server (vLLM, Ollama, LM Studio); OPENAI_API_KEY may come from
# OPENAI_API_KEY_FILE. Checked at start-up (runs.apps): an unknown provider or a missing
# key is an ImproperlyConfigured error naming the setting.
AGENTOPS_MODEL = (env_str("AGENTOPS_MODEL", "") or "").strip()
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_API_KEY = env_str("OPENAI_API_KEY") or None
# Prices in USD per million tokens, as JSON: {"openai:gpt-4.1-mini": {"input": "0.40",
# "output": "1.60"}}. A model without a price makes a run's cost unknown, never 0.
AGENTOPS_MODEL_PRICES = env_json("AGENTOPS_MODEL_PRICES", {})
# Named rate limits, as JSON (runs.engine.effects.rate_limits): {"openai":
# {"requests_per_minute": 500, "tokens_per_minute": 200000}}, counted across all workers.
AGENTOPS_RATE_LIMITS = env_rate_limits("AGENTOPS_RATE_LIMITS")

# Modules that define and register workflows (imported by runs.apps at start-up). The
# lab app registers the simulator's own (room_temperature, chat, dim_lights, ...;
# lab/workflows) when it is installed.
AGENTOPS_WORKFLOW_MODULES = [
    "runs.workflows.order_followup",
    # Parallel branches: a map step and its join (docs/parallel.md).
    "runs.workflows.fanout_demo",
    # Child runs: a triage agent hands each ticket to a sub-agent (docs/parallel.md).
    "runs.workflows.triage_demo",
    # Pydantic AI agents registered as workflows (docs/agents.md), declared here and
    # imported on first use (runs/workflows/declared.py).
    "runs.workflows.declared",
]
# More modules (comma-separated) for deployments that register their own workflows or a
# new version of one; tests use it to play "old code" and "new code" side by side.
AGENTOPS_EXTRA_WORKFLOW_MODULES = [
    m.strip()
    for m in (env_str("AGENTOPS_EXTRA_WORKFLOW_MODULES", "") or "").split(",")
    if m.strip()
]
AGENTOPS_WORKFLOW_MODULES += AGENTOPS_EXTRA_WORKFLOW_MODULES
