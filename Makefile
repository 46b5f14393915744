VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: install demo test test-all lint bench bench-quick clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e '.[dev]'
	# Bytecode, as a regular install writes it: an editable install leaves it to the first import, which
	# never writes it where PYTHONDONTWRITEBYTECODE is set, and then every process compiles graphcache again.
	$(PY) -m compileall -q graphcache
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) benchmarks/demo.py

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-all: $(VENV)/.installed
	GRAPHCACHE_SLOW_TESTS=1 $(PY) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check graphcache tests benchmarks examples

bench: $(VENV)/.installed
	$(PY) benchmarks/run_all.py

bench-quick: $(VENV)/.installed
	$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
