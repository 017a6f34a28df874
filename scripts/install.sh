#!/usr/bin/env bash
# Installs what cudal2 needs into the Python that runs it ($PYTHON, else python3; a virtual environment's python keeps
# the packages out of the system's) and builds cudal2 there (editable), showing the build's progress. A run on an
# unchanged tree builds and installs nothing (build/install.stamp: build_tools/install_stamp.py).
#   scripts/install.sh [--test | --check]   --test: also the test dependencies (extras test and ray);
#                                           --check: only say whether a build is needed (exit 1 and why if so)
# Uses the torch already installed if there is one; otherwise installs torch 2.14.1 (a CUDA 13.0 build). Offline
# machines: put wheels in .whl/ (pip --find-links).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras=(build bench)
case "${1:-}" in
  "" | --check) ;;
  --test) extras+=(test ray) ;;
  *) echo "usage: scripts/install.sh [--test | --check]   (--test: also the test dependencies: extras test," \
          "ray; --check: only say whether a build is needed)" >&2
     exit 2 ;;
esac
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
[ "${1:-}" != --check ] || exec "$PY" -m build_tools.install_stamp check
PIP=("$PY" -m pip install -q --disable-pip-version-check)
pip_install() {  # wheels carried in .whl/ first (offline GPU machines), then the package index
  { [ -d .whl ] && "${PIP[@]}" --no-index --find-links .whl "$@" 2>/dev/null; } || "${PIP[@]}" "$@"
}

"$PY" -c "import torch" 2>/dev/null || pip_install torch==2.14.1
missing=$("$PY" -m build_tools.requirements "${extras[@]}")
[ -z "$missing" ] || { echo "cudal2: installing $missing into $("$PY" -c 'import sys; print(sys.prefix)')"; pip_install $missing; }
missing=$("$PY" -m build_tools.requirements --no-deps "${extras[@]}")
[ -z "$missing" ] || pip_install --no-deps $missing

if reason=$("$PY" -m build_tools.install_stamp check); then
  echo "cudal2: build and install are current (build/install.stamp), nothing to build"
  exit 0
fi
echo "cudal2: building ($reason); the build prints its estimate first, later builds compile only what changed"
"$PY" setup.py -q build_ext --inplace
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .  # registers it; build current
"$PY" -m build_tools.install_stamp write
