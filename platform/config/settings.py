"""Django settings. Every value read from the environment goes through `config.env`."""

from __future__ import annotations

from . import env

BASE_DIR = env.REPO_ROOT
DATA_DIR = env.data_dir()

# production or development (README "Deployment"). Unset: development on the embedded database (DATABASE_URL
# unset: `make run`, `make migrate`, a developer's manage.py), production with a database server;
# tools.testenv (`make test`) says development. Production refuses to start without SECRET_KEY and is
# served for HTTPS behind a TLS-terminating proxy (below); development makes a key once in the data dir.
_database = env.database()
ENVIRONMENT = env.choice(
    "TREEMETER_ENV", "development" if _database.embedded else "production", ("development", "production")
)
DEVELOPMENT = ENVIRONMENT == "development"

SECRET_KEY = env.secret_key("SECRET_KEY", DATA_DIR / "secret-key", development=DEVELOPMENT)
DEBUG = env.boolean("DEBUG", False)
ALLOWED_HOSTS = env.csv_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

# HTTPS behind a proxy that terminates TLS and sets X-Forwarded-Proto (on by default in production;
# `manage.py check --deploy` then reports nothing). Each switch is an environment variable of its name.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env.boolean("TRUST_X_FORWARDED_PROTO", not DEVELOPMENT) else None
)
SECURE_SSL_REDIRECT = env.boolean("SECURE_SSL_REDIRECT", not DEVELOPMENT)
# Paths (regular expressions, no leading slash) answered over plain HTTP too, e.g. the agents' signed
# endpoints reached inside a private network: docker/compose.yaml.
SECURE_REDIRECT_EXEMPT = env.csv_list("SECURE_REDIRECT_EXEMPT", [])
SECURE_HSTS_SECONDS = env.integer("SECURE_HSTS_SECONDS", 0 if DEVELOPMENT else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.boolean("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEVELOPMENT)
SECURE_HSTS_PRELOAD = env.boolean("SECURE_HSTS_PRELOAD", not DEVELOPMENT)
SESSION_COOKIE_SECURE = env.boolean("SESSION_COOKIE_SECURE", not DEVELOPMENT)
CSRF_COOKIE_SECURE = env.boolean("CSRF_COOKIE_SECURE", not DEVELOPMENT)
CSRF_TRUSTED_ORIGINS = env.csv_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "catalog",
    "contracts",
    "agents",
    "ingest",
    "clickhouse_store",
    "billing",
    "sla",
    "demo",
    "entitlements",
    "ledger",
    "webhooks",
    "idempotency",
    "scheduling",
    "usage",
    "frontend",
    "finance",
    "package_factory",
    "sandbox",
    "releases",
    "django_htmx",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Every /v1/ error answer in the standard shape, whoever made it; control characters in paths refused.
    "config.middleware.ApiErrorMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "idempotency.middleware.IdempotencyMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

if _database.embedded:
    from .embedded import start_embedded_postgres

    _connection = start_embedded_postgres(DATA_DIR / "postgres")
else:
    _connection = {
        "NAME": _database.name,
        "USER": _database.user,
        "PASSWORD": _database.password,
        "HOST": _database.host,
        "PORT": _database.port,
    }
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        **_connection,
        # The test runner's database; tools.testenv names one per run so parallel runs never collide.
        "TEST": {"NAME": env.text("DATABASE_TEST_NAME", "") or None},
        # Keep connections across requests (checked before reuse) instead of one new one per request.
        "CONN_MAX_AGE": env.integer("DB_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en"
# The portal speaks Simplified Chinese and English (Django i18n; catalogues in each app's locale/).
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
FORMAT_MODULE_PATH = ["frontend.formats"]
LOGIN_URL = "portal-login"
LOGIN_REDIRECT_URL = "portal-home"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# ECharts comes from the npm registry at build time (`make install` runs `npm ci` in frontend/).
_ECHARTS = BASE_DIR / "frontend" / "node_modules" / "echarts" / "dist"
STATICFILES_DIRS = [("vendor/echarts", _ECHARTS)] if _ECHARTS.is_dir() else []
# WhiteNoise serves static files from the app (no reverse proxy needed); from the finders as well, so
# `make run` and tests serve them without a collectstatic step.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every start when it is missing

# ClickHouse: chdb:///<path> (in-process engine, one process per path) or http(s)://… (a server).
CLICKHOUSE_URL = env.clickhouse_url()
# Empty: one node. A cluster name: Replicated tables plus a Distributed table over that cluster.
CLICKHOUSE_CLUSTER = env.text("CLICKHOUSE_CLUSTER", "")

# Celery: no broker configured means tasks run in-process (the embedded default).
_broker = env.broker_url()
CELERY_TASK_ALWAYS_EAGER = _broker == ""
CELERY_BROKER_URL = _broker or "memory://localhost/"  # unused while eager; a host keeps kombu quiet
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env.text("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"

# The platform's Ed25519 signing key (base64 of the 32-byte seed).
PLATFORM_SIGNING_KEY = env.ed25519_seed("TREEMETER_SIGNING_KEY", DATA_DIR / "platform-signing-key")

# The verifiable log: checkpoint origin line (and signing key name), and how often beat publishes one.
LEDGER_ORIGIN = env.text("LEDGER_ORIGIN", "treemeter.local/ledger")
LEDGER_CHECKPOINT_MINUTES = env.integer("LEDGER_CHECKPOINT_MINUTES", 10, minimum=1)
LEDGER_AUDIT_WINDOW_HOURS = env.integer("LEDGER_AUDIT_WINDOW_HOURS", 48, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "ledger-checkpoint": {"task": "ledger.publish_checkpoint", "schedule": LEDGER_CHECKPOINT_MINUTES * 60.0},
    # SLA: burn-rate alerts every minute; close the previous SLA month (reports, credits) hourly.
    "sla-burn-rates": {"task": "sla.evaluate_burn_rates", "schedule": 60.0},
    "sla-close-periods": {"task": "sla.close_due_periods", "schedule": 3600.0},
    # Customers' dependencies (sla.dependencies): a probe a minute; 5 minutes of failure pause billing.
    "sla-watch-dependencies": {"task": "sla.watch_dependencies", "schedule": 60.0},
    "idempotency-purge": {"task": "idempotency.purge_expired", "schedule": 3600.0},
    # quota.exhausted webhook events for contracts' included quantities.
    "contracts-quota-watch": {"task": "contracts.publish_exhausted_quotas", "schedule": 300.0},
    # The store audit: records in ClickHouse against the log (ledger.audit), hourly over a sliding window.
    "ledger-audit-store": {"task": "ledger.audit_store", "schedule": 3600.0},
    # The ingest outbox: committed batches whose ClickHouse insert failed are stored again (ingest.services).
    "ingest-store-pending": {"task": "ingest.store_pending", "schedule": 60.0},
    # Customer sandboxes: each one's simulated events of the day, sent as they fall due (sandbox.tasks).
    "sandbox-simulate-traffic": {"task": "sandbox.simulate_traffic", "schedule": 300.0},
    # Gray releases: each plan's stage in force judged by its gate (holds, automatic promotions).
    "releases-evaluate-gates": {"task": "releases.evaluate_gates", "schedule": 300.0},
}

# Ingest limits.
# GET /metrics (config.metrics): `Authorization: Bearer <METRICS_TOKEN>`; production serves it only with one.
METRICS_TOKEN = env.text("METRICS_TOKEN", "")
CELERY_TASK_DEFAULT_QUEUE = "celery"  # Celery's own default, named for the queue-depth gauge

INGEST_MAX_BATCH_BYTES = env.integer("INGEST_MAX_BATCH_BYTES", 32 * 1024 * 1024, minimum=1024)
INGEST_MAX_BATCH_RECORDS = env.integer("INGEST_MAX_BATCH_RECORDS", 20_000, minimum=1)
# The time window of records (docs/record-format.md): at most this far ahead of the platform's clock, and
# no further back than this, or the contract's late-usage horizon when longer (late_usage_days, ignore_after).
INGEST_MAX_FUTURE_SKEW_SECONDS = env.integer("INGEST_MAX_FUTURE_SKEW_SECONDS", 300, minimum=0)
INGEST_MAX_PAST_DAYS = env.integer("INGEST_MAX_PAST_DAYS", 35, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = INGEST_MAX_BATCH_BYTES + 1024
# Every other JSON body (REST and agent requests; common.parsers): at most this many bytes, else 413.
API_JSON_MAX_BYTES = env.integer("API_JSON_MAX_BYTES", 1024 * 1024, minimum=1024)
# A body that is a file users keep (common.parsers.JsonFileParser): a LiteLLM price file imported into
# the LLM price catalogue; LiteLLM's own file is about 1.5 MB.
JSON_FILE_MAX_BYTES = env.integer("JSON_FILE_MAX_BYTES", 8 * 1024 * 1024, minimum=1024)

# The package factory (package_factory): the largest ONNX model it takes, and the agent image its
# deployment manifests name.
FACTORY_MAX_MODEL_BYTES = env.integer("FACTORY_MAX_MODEL_BYTES", 64 * 1024 * 1024, minimum=1024)
FACTORY_EXECUTOR_IMAGE = env.text("FACTORY_EXECUTOR_IMAGE", "treemeter-agent:latest")

# Customer sandboxes (sandbox): where the traffic simulator sends their requests (the L1 router, or an
# agent); empty: no simulated traffic.
SANDBOX_SERVING_URL = env.text("SANDBOX_SERVING_URL", "")

# Stripe (billing.payments): empty key = invoices are not pushed; STRIPE_API_BASE points tests at a fake.
STRIPE_API_KEY = env.text("STRIPE_API_KEY", "")
STRIPE_WEBHOOK_SECRET = env.text("STRIPE_WEBHOOK_SECRET", "")
STRIPE_API_BASE = env.text("STRIPE_API_BASE", "https://api.stripe.com")
# Where Stripe Checkout sends the buyer back after paying for a package (the portal's contracts page).
CHECKOUT_RETURN_URL = env.text("CHECKOUT_RETURN_URL", "http://127.0.0.1:8000/contracts")

# Outgoing webhooks (webhooks app): tries per delivery, backoff base (doubles per try), HTTP timeout.
WEBHOOK_MAX_ATTEMPTS = env.integer("WEBHOOK_MAX_ATTEMPTS", 6, minimum=1)
WEBHOOK_RETRY_BASE_SECONDS = env.integer("WEBHOOK_RETRY_BASE_SECONDS", 30, minimum=0)
WEBHOOK_TIMEOUT_SECONDS = env.integer("WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# Off: endpoints must resolve to public addresses (no SSRF into private networks). On for local receivers.
WEBHOOK_ALLOW_PRIVATE_URLS = env.boolean("WEBHOOK_ALLOW_PRIVATE_URLS", False)

# Programs send `Authorization: Bearer tmt_…` (accounts.ApiToken); the portal uses the session.
# Reads: any member of the tenant; writes: the view's `write_roles` (accounts.permissions).
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "accounts.permissions.TenantRolePermission",
    ],
    # The only parser: orjson with the size, nesting and member limits (common.parsers, docs/api.md).
    "DEFAULT_PARSER_CLASSES": ["common.parsers.JsonParser"],
    "DEFAULT_PAGINATION_CLASS": "common.pagination.CursorPage",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env.text("API_RATE_ANON", "120/min"),
        "user": env.text("API_RATE_USER", "1200/min"),
    },
    "EXCEPTION_HANDLER": "common.error_handler.api_exception_handler",
}
# Throttle counters live in the cache: Redis when CACHE_URL names one, else this process's memory.
_cache_url = env.text("CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "config.redis_cache.SharedClientRedisCache", "LOCATION": _cache_url}
        if _cache_url
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# API tokens kept in the cache after lookup (accounts.token_cache); 0 = look up every call.
API_TOKEN_CACHE_SECONDS = env.integer("API_TOKEN_CACHE_SECONDS", 60, minimum=0)
# Usage-dashboard answers kept per tenant data version (usage.cache); 0 turns the cache off.
USAGE_ANSWER_CACHE_SECONDS = env.integer("USAGE_ANSWER_CACHE_SECONDS", 600, minimum=0)
IDEMPOTENCY_KEY_TTL_HOURS = env.integer("IDEMPOTENCY_KEY_TTL_HOURS", 24, minimum=1)
SPECTACULAR_SETTINGS = {
    "TITLE": "Treemeter API",
    "VERSION": "1",
    "DESCRIPTION": "Metering, billing and SLA contracts for MoE inference.",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.errors.document_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "InvoiceStatusEnum": "billing.models.Invoice.Status",
        "SlaReportStatusEnum": "sla.models.SlaReport.Status",
        "ManifestRefusalReasonEnum": "treemeter_records.protocol.MANIFEST_REFUSAL_REASONS",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.text("LOG_LEVEL", "WARNING")},
}
