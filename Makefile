# Two commands on a fresh machine with only python3 and make:
#   make demo   set up .venv and run the main job
#   make test   set up .venv with the test extras and run ruff, mypy --strict and pytest
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv

.PHONY: demo test lint typecheck pytest bench clean

$(UV):
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet uv

$(VENV)/.installed: pyproject.toml | $(UV)
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -e '.[service]'  # serve + /ui after the demo
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(UV)
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m agentledger demo

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy --strict src
	$(VENV)/bin/pytest

bench: $(VENV)/.installed-test
	$(PY) bench/transcript_codec.py
	$(PY) bench/sqlite_store.py
	$(PY) bench/postgres_store.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
