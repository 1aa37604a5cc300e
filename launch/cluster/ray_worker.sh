#!/usr/bin/env bash
# Join this node to the Ray head started by ray_head.sh.  Usage: launch/cluster/ray_worker.sh HEAD_IP[:PORT]
set -euo pipefail
HEAD="${1:?usage: ray_worker.sh HEAD_IP[:PORT]}"
[[ "$HEAD" == *:* ]] || HEAD="$HEAD:6379"
export VERL_USE_EXTERNAL_MODULES=earthrl.algorithms.verl_plugin,earthrl.rollout.verl_loop
ray start --address="$HEAD" --num-gpus="$(nvidia-smi -L | wc -l)" --block
