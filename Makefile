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
	$(PY) -m pytest -q -n 2 --dist loadfile

test-all: $(VENV)/.installed
	GRAPHCACHE_SLOW_TESTS=1 $(PY) -m pytest -q -n 2 --dist loadfile

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check graphcache tests benchmarks examples

# benchmarks/whole_process.py times whole processes (python SCRIPT, start to first result) with hyperfine.
NEED_HYPERFINE = @command -v hyperfine >/dev/null 2>&1 || { echo "make $@: hyperfine is not installed; the \
benchmarks time whole processes with it (benchmarks/whole_process.py). Install it: apt-get install hyperfine \
(Debian/Ubuntu) or cargo install hyperfine." >&2; exit 1; }

bench: $(VENV)/.installed
	$(NEED_HYPERFINE)
	$(PY) benchmarks/run_all.py

bench-quick: $(VENV)/.installed
	$(NEED_HYPERFINE)
	$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
