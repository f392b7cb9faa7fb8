#!/usr/bin/env bash
# The main job: install, build, then take examples/gpt_mlp.fp8 through the
# front end (check, explain), the planner (plan) and the kernel generator
# (compile: NVRTC, no GPU needed); then, on a machine with a GPU, run the
# example host program (examples/host/gpt_mlp_step: the spec's two layers
# forward and backward through fp8c::Session), and without one the CPU
# distributed oracle (verify) on a small example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
fp8c=build/tools/fp8c
spec=examples/gpt_mlp.fp8
echo "== fp8c check $spec"
$fp8c check "$spec" && echo "ok"
echo "== fp8c explain $spec"
$fp8c explain "$spec"
echo "== fp8c plan $spec --layer fc1"
$fp8c plan "$spec" --layer fc1
echo "== fp8c compile $spec (sm_90a, through NVRTC)"
$fp8c compile "$spec" --cache-dir "$(mktemp -d)"
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== examples/host/gpt_mlp_step $spec (forward + backward on the GPU)"
  build/examples/host/gpt_mlp_step "$spec" --tokens 2048 --steps 3
else
  small=examples/current_scaling_debug.fp8
  echo "== no GPU here: fp8c verify $small --tokens 64 (2 CPU ranks vs 1 rank vs float64)"
  $fp8c verify "$small" --tokens 64
fi
