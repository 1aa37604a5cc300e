#!/usr/bin/env bash
# Start the Ray head of an EarthRL verl cluster on this node (docs/cluster.md).
# Usage: launch/cluster/ray_head.sh [PORT]   (default 6379); then ray_worker.sh HEAD_IP on the other nodes.
set -euo pipefail
PORT="${1:-6379}"
export VERL_USE_EXTERNAL_MODULES=earthrl.algorithms.verl_plugin,earthrl.rollout.verl_loop
ray start --head --port="$PORT" --num-gpus="$(nvidia-smi -L | wc -l)" --dashboard-host=0.0.0.0
echo "head started; on each worker node: launch/cluster/ray_worker.sh $(hostname -I | awk '{print $1}'):$PORT"
