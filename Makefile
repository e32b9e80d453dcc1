# The two entry points of the README: `make demo` (the demo night, offline) and `make test`. Both start with
# `make install` (only the installing): .venv from scratch when it is missing, the model server's own virtualenv, and
# the system packages (system-deps: WordNet for the offline judge, PostgreSQL and Redis for the Celery stack).
VENV ?= .venv
SERVE_VENV ?= .venv-serve
export SERVE_VENV  # `mavias serve` (and the demo and tests through it) looks for the serving environment here
PYTHON ?= python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install demo test system-deps serve-venv

install: system-deps $(VENV)/.installed-all serve-venv

demo: install
	$(VENV)/bin/mavias demo

# The import-linter contracts of pyproject.toml first (the layers, no cycles, a model server without torch), then
# the tests. plugins/ goes on the path for the Airflow plugin; the DAG folder is found from the repository root.
# The tests run on TEST_WORKERS processes (pytest-xdist), one test file per worker at a time so that a file's
# services and fixtures start once; every worker has its own cache folder and one torch thread. Three workers on two
# cores: the Airflow nights spend part of their time waiting on services and subprocesses. Files are handed out in
# collection order (--no-loadscope-reorder), which tests/conftest.py starts with the longest files.
TEST_WORKERS ?= 3
test: install $(VENV)/.installed-test
	PYTHONPATH=plugins $(VENV)/bin/lint-imports
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# WordNet 3.0 for the offline relevance judge (no PyPI package ships its data); PostgreSQL 15 and Redis 7 for the
# CeleryExecutor stack (`mavias airflow up --executor celery`, started by its test on 127.0.0.1).
SYSTEM_PACKAGES := wordnet-base postgresql redis-server
system-deps:
	@[ -f /usr/share/wordnet/data.noun ] && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
		&& command -v redis-server >/dev/null \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(SYSTEM_PACKAGES); }

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip

$(VENV)/.installed-all: pyproject.toml $(VENV)/bin/python
	$(VENV)/bin/pip install -q -e '.[all]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/bin/python $(VENV)/.installed-llama
	$(VENV)/bin/pip install -q -e '.[all,test]'
	touch $@

# llama.cpp (the tests' OpenAI-compatible LLM server) compiles from source, by default for the building CPU
# (-march=native): on a CPU that reports AMX but runs a kernel that does not enable it, that build dies with SIGILL at
# the first request. So it is built portable (AVX2, no AMX), once per machine: the wheel is kept outside the checkout,
# keyed by version and flags, and pip's own wheel cache (keyed by neither) is bypassed.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_WHEELS := $(HOME)/.cache/mavias/llama-wheels/$(LLAMA_CPP_VERSION)-$(shell echo '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)

$(VENV)/.installed-llama: $(VENV)/bin/python
	ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' \
		$(VENV)/bin/pip wheel -q --no-cache-dir --no-deps -w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_CPP_VERSION)'
	$(VENV)/bin/pip install -q --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	touch $@

# The model server's own environment (kserve cannot share one with Airflow, and it must not pull torch): the
# `serve` extra alone; the mavias sources are found through PYTHONPATH (`mavias serve` and the tests set it).
serve-venv: $(SERVE_VENV)/.installed

$(SERVE_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/pip install -q --upgrade pip
	$(SERVE_VENV)/bin/python docker/serve_requirements.py | xargs -d '\n' $(SERVE_VENV)/bin/pip install -q
	touch $@
