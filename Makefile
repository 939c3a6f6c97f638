# Two commands on a fresh machine with only python3 and make:
#   make demo   set up .venv and run the main job
#   make test   set up .venv with every extra and the test group, run ruff, mypy --strict, pytest
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

# The extras the tests exercise, and the test tools from the PEP 735 dependency group.
$(VENV)/.installed-test: pyproject.toml | $(UV)
	$(UV) pip install --quiet --compile-bytecode --python $(PY) \
		-e '.[all,conformance,temporal-dev]' --group test
	touch $@

demo: $(VENV)/.installed
	$(PY) -m agentledger demo

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy --strict src
	$(VENV)/bin/pytest -n 2 --dist worksteal

$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed-test
	$(UV) pip install --quiet --compile-bytecode --python $(PY) --group bench
	touch $@

bench: $(VENV)/.installed-bench
	$(PY) bench/transcript_codec.py
	$(PY) bench/sqlite_store.py
	$(PY) bench/postgres_store.py
	$(PY) bench/import_time.py
	$(PY) bench/peers.py
	$(PY) bench/tracing_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
