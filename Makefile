# Muster developer entry points. `make test` is what CI runs (.ci/run).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lint bench e2e-provision

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

## Start Muster on its built-in demo cluster at http://127.0.0.1:8888
demo: venv
	$(VENV)/bin/muster serve --demo

## Provision the real etcd + kube-apiserver + kube-scheduler used by tests/e2e (cached)
e2e-provision:
	bash scripts/provision-k8s.sh

## Lint and type-check, then every test, including the real kube-scheduler end-to-end tests
test: venv e2e-provision
	$(VENV)/bin/ruff check app tests scripts loadtest
	$(VENV)/bin/mypy app
	$(VENV)/bin/pytest

lint: venv
	$(VENV)/bin/ruff check app tests scripts loadtest
	$(VENV)/bin/ruff format --check app
	$(VENV)/bin/mypy app

bench: venv
	$(PY) scripts/bench_extender.py
	$(PY) scripts/bench_webhook.py
