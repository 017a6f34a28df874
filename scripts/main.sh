#!/usr/bin/env bash
# The main job: installs/builds cudal2, shows what was built and what the GPU is, runs the self-test and, on a GPU,
# a quick benchmark against torch. Without a GPU it says so and runs what can run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
PY=${PYTHON:-python3}
"$PY" -m cudal2_ops info
"$PY" -m cudal2_ops check
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  "$PY" -m cudal2_ops bench
else
  echo "No CUDA GPU here: the kernels and cuBLASLt path need one. Built and self-tested the CPU fallback only."
fi
