#!/usr/bin/env bash
# The main job: install, build, then check and explain examples/gpt_mlp.fp8.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
spec=examples/gpt_mlp.fp8
echo "== fp8c check $spec"
build/tools/fp8c check "$spec" && echo "ok"
echo "== fp8c explain $spec"
build/tools/fp8c explain "$spec"
