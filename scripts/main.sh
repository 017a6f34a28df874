#!/usr/bin/env bash
# The main job: installs/builds cudal2, shows what was built and what the GPU is, runs the self-test and, on a GPU,
# a quick benchmark against torch. Without a GPU (torch sees none; before torch is installed, nvidia-smi lists none)
# it builds the extension without the kernel library (CUDAL2_SKIP_KERNELS=1: the kernels cannot run here, and compiling
# them takes about 20 min on 2 cores), says so, and prints the command that builds them anyway. A CUDAL2_SKIP_KERNELS
# set by the caller is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

gpu_visible() {  # torch sees a CUDA device; where torch cannot be imported yet, nvidia-smi lists a GPU
  local rc=0
  "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" 2>/dev/null || rc=$?
  case $rc in
    0) return 0 ;;
    3) return 1 ;;
    *) nvidia-smi -L >/dev/null 2>&1 ;;
  esac
}

skipped_kernels=0
if [ -z "${CUDAL2_SKIP_KERNELS+set}" ] && ! gpu_visible; then
  export CUDAL2_SKIP_KERNELS=1
  skipped_kernels=1
  echo "cudal2: no CUDA GPU visible: building the extension without the kernel library (CUDAL2_SKIP_KERNELS=1)"
fi
./scripts/install.sh
"$PY" -m cudal2_ops info
"$PY" -m cudal2_ops check
if gpu_visible; then
  "$PY" -m cudal2_ops bench
else
  echo "No CUDA GPU here: the kernels and cuBLASLt path need one. Built and self-tested the CPU fallback only."
  if [ "$skipped_kernels" = 1 ]; then
    estimate=$("$PY" -m build_tools.kernel_lib --estimate 2>/dev/null) || estimate=""
    echo "To build the kernel library anyway${estimate:+ ($estimate)}: CUDAL2_SKIP_KERNELS=0 ./scripts/main.sh"
  fi
fi
