# Developer and CI entry points. `make test` installs missing system packages
# (scripts/install_system_deps.sh; as root, else it prints the command to run), then runs
# pytest in parallel (pytest-xdist) beside a throwaway PostgreSQL and Redis
# (scripts/with_services.py). Extra pytest arguments go in PYTEST_ARGS, the number of
# test processes in PYTEST_WORKERS, e.g.
#   make test PYTEST_ARGS="-x -k drill" PYTEST_WORKERS=1

PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Most tests wait on subprocesses and servers rather than compute, so more processes than
# this 2-core machine's cores still shorten the run; tests that share a server-wide
# resource run in one xdist_group (--dist loadgroup).
PYTEST_WORKERS ?= 4

.PHONY: system-deps venv demo test lint deploy-smoke clean

system-deps:
	bash scripts/install_system_deps.sh

venv: $(VENV)/.installed

# The stamp depends on pyproject.toml, so changing dependencies reinstalls them.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --disable-pip-version-check -e ".[test]"
	touch $@

demo: venv
	$(VENV_PY) manage.py demo

# The suite's PostgreSQL runs without fsync (--no-fsync): its data is thrown away, and a
# synced commit or CREATE DATABASE costs milliseconds to seconds on a busy disk. Python
# may write bytecode caches even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, as in some CI images): the suite starts about 800
# Python processes, and without the caches each one compiles the project from source.
test: system-deps venv
	env -u PYTHONDONTWRITEBYTECODE $(VENV_PY) scripts/with_services.py --no-fsync -- \
		$(VENV_PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The house style and the type check, as CI runs them.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The production topology of docs/deploy.md on loopback, smoke-tested, torn down.
deploy-smoke: system-deps venv
	$(VENV_PY) scripts/deploy_smoke.py

# Removes what `make venv` and test runs create; var/ (the dev database) is kept.
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache *.egg-info build dist
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
