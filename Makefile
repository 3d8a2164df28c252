# Developer and CI entry points. `make test` runs pytest beside a throwaway PostgreSQL
# and Redis (scripts/with_services.py); extra pytest arguments go in PYTEST_ARGS, e.g.
#   make test PYTEST_ARGS="-x -k drill"

PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv demo test clean

venv: $(VENV)/.installed

# The stamp depends on pyproject.toml, so changing dependencies reinstalls them.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --disable-pip-version-check -e ".[test]"
	touch $@

demo: venv
	$(VENV_PY) manage.py demo

test: venv
	$(VENV_PY) scripts/with_services.py -- $(VENV_PY) -m pytest $(PYTEST_ARGS)

# Removes what `make venv` and test runs create; var/ (the dev database) is kept.
clean:
	rm -rf $(VENV) .pytest_cache *.egg-info build dist
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
