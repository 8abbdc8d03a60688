# gpufed — every target sets up what it needs first, so each works on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
REDIS_URL ?= redis://127.0.0.1:6379/0
export REDIS_URL
export PATH := $(CURDIR)/tools/bin:$(PATH)

.PHONY: help setup tools redis browser prometheus lint typecheck contracts bytecode unit test demo image bench clean

help:
	@echo "make demo   - set up, then run the demo (three simulated clusters, the broker, jobs placed)"
	@echo "make test   - set up, then lint, type-check, check layer contracts and run every test"
	@echo "make image  - build the broker's image from the Containerfile (IMAGE=..., CONTAINER=podman)"
	@echo "make bench  - run the benchmarks at full scale (minutes; figures and commands: docs/benchmarks.md)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) tools

tools: $(STAMP)
	$(PY) tools/install_k8s_tools.py

redis:
	@$(PY) tools/ensure_redis.py

# The dashboard's browser test drives the distribution's Chromium with Playwright (pip, in .[dev]);
# no browser is downloaded. Installed with apt when missing (root, or sudo without a password).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium; }

# A real Prometheus server and promtool (Debian's `prometheus` package, 2.42): tests that read or write
# Prometheus data run against the real server, and alert rules are checked with `promtool check rules`.
# Installed with apt when missing, as the browser is. The package's own service is not started: tests
# start `prometheus` themselves on a free port.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus; \
	  { command -v systemctl >/dev/null 2>&1 && $$SUDO systemctl stop prometheus prometheus-node-exporter 2>/dev/null; } || true; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/lint_containerfile.py Containerfile --uid 10001

# mypy's cache outside the checkout, shared by every clone and worktree of this user: a cold mypy over
# the code, the tests and the typed libraries they use (kubernetes, pydantic, fastapi) takes ~35 s of CPU,
# one with this cache ~3 s, also in a fresh clone (entries are checked against each file's hash, the mypy
# version and the options, so a stale one is only re-checked, never trusted). MYPY_CACHE_DIR=... to move it.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpufed/mypy

typecheck: $(STAMP)
	$(VENV)/bin/mypy --cache-dir "$(MYPY_CACHE_DIR)"

contracts: $(STAMP)
	$(VENV)/bin/lint-imports

# The suite runs on PYTEST_WORKERS processes (pytest-xdist), a test file per worker at a time
# (--dist loadfile: a module's shared kubesim and broker stay in one process); each worker starts its
# own private redis-server and Ray. Most integration time is waiting on real processes and time-driven
# simulations, so 4 workers on 2 cores (a fresh clone: 484 s on 4, 611 s on 3; docs/benchmarks.md).
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 4

# The project's own modules compiled once, before the suite: every process the suite starts (pytest-xdist
# workers, `gpufed serve`, Ray's poller workers, kubesim) imports them, and where PYTHONDONTWRITEBYTECODE
# is set (as on this CI host) none would write its .pyc, so each compiled them again (~0.6 s of CPU each).
# The .pyc files land in __pycache__ beside the sources (ignored by git); the installed packages' were
# compiled by pip.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j0 broker adapters kubesim tests

test: setup redis browser prometheus lint typecheck contracts bytecode
	@$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc

unit: $(STAMP)
	$(VENV)/bin/pytest tests/unit -q

demo: setup
	$(VENV)/bin/gpufed demo $(ARGS)

# The broker's image from the Containerfile (docker, or CONTAINER=podman). The default tag is the chart's
# default image, gpufed:<appVersion>; IMAGE=registry.example.com/gpufed/gpufed:0.1.0 to push it somewhere.
CONTAINER ?= docker
APP_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' charts/gpufed/Chart.yaml)
IMAGE ?= gpufed:$(APP_VERSION)
image:
	$(CONTAINER) build -f Containerfile -t $(IMAGE) .

# The full-scale runs behind docs/benchmarks.md. Each prints its figures; none is a test.
bench: setup redis
	$(PY) -m benchmarks.summarize 1000 100
	$(PY) benchmarks/kubesim_scale.py --clusters 100 --nodes 1000 --requests 50
	$(PY) benchmarks/capacity_sync.py --clusters 1 --nodes 1000 --decode
	$(PY) benchmarks/capacity_sync.py --clusters 100 --nodes 1000 --pods-per-node 5

clean:
	rm -rf $(VENV) tools/bin .pytest_cache .mypy_cache .ruff_cache .import_linter_cache .demo
