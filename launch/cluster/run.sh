#!/usr/bin/env bash
# The one command that starts a run on a Ray cluster (run it on the head node after ray_head.sh):
#   launch/cluster/run.sh cluster=a100x16 model=qwen3-4b model.path=/data/Qwen3-4B-Instruct-2507 algorithm=mefr_tap env=codeact
# verl's trainer joins the running cluster (RAY_ADDRESS=auto); every override is passed to `earthrl train`.
set -euo pipefail
export RAY_ADDRESS="${RAY_ADDRESS:-auto}"
export VERL_USE_EXTERNAL_MODULES=earthrl.algorithms.verl_plugin,earthrl.rollout.verl_loop
exec "${EARTHRL:-earthrl}" train backend=verl "$@"
