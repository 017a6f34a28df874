#!/usr/bin/env bash
# Installs what cudal2 needs and builds it (idempotent). Uses the torch already installed if there is one;
# otherwise installs torch 2.14.1 (a CUDA 13.0 build). Offline machines: put wheels in .whl/ (pip --find-links).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install -q --disable-pip-version-check)
pip_install() {  # wheels carried in .whl/ first (offline GPU machines), then the package index
  { [ -d .whl ] && "${PIP[@]}" --no-index --find-links .whl "$@" 2>/dev/null; } || "${PIP[@]}" "$@"
}

"$PY" -c "import torch" 2>/dev/null || pip_install torch==2.14.1
missing=$("$PY" - <<'PYEOF'
import importlib.util
wanted = {"ninja": "ninja", "pybind11": "pybind11", "numpy": "numpy", "pytest": "pytest", "tqdm": "tqdm",
          "matplotlib": "matplotlib"}
print(" ".join(pkg for mod, pkg in wanted.items() if importlib.util.find_spec(mod) is None))
PYEOF
)
[ -z "$missing" ] || pip_install $missing
CUTLASS_PIN=$("$PY" -c "from build_tools.kernel_lib import CUTLASS_PIN; print(CUTLASS_PIN)")
"$PY" -c "import cutlass_library" 2>/dev/null || pip_install --no-deps "nvidia-cutlass==$CUTLASS_PIN"

if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
