#!/usr/bin/env bash
# Compiles, on a machine without a GPU, the kernel objects a GPU session will link: the library's kernels (default set
# and tables) and the candidates named in $CANDIDATES (comma-separated, generated here and removed again), for
# $TORCH_CUDA_ARCH_LIST (default 9.0a), into a fresh object cache packed as a tarball of build/kernel_cache/. Object
# keys hash the source, the repository headers it includes, the flags and the nvcc banner, so the GPU host's build
# finds them when its nvcc is the same release; unpack there with `tar xzf FILE` in the repository root.
#   scripts/prebuild_kernels.sh OUT.tgz
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:?usage: scripts/prebuild_kernels.sh OUT.tgz}")
PY=${PYTHON:-python3}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache="$work/build/kernel_cache"
"$PY" -m build_tools.kernel_lib --cache-dir "$cache" --out "$work/library.so"
if [ -n "${CANDIDATES:-}" ]; then
  names=${CANDIDATES//,/ }
  created=$("$PY" -c "import sys; from build_tools.kernel_lib import KERNELS_DIR; \
    from cudal2_catalog.config import HgemmConfig; paths = [KERNELS_DIR / c.arch_dir / (c.name + '.cu') \
    for c in map(HgemmConfig.from_name, sys.argv[1:])]; print(' '.join(str(p) for p in paths if not p.exists()))" \
    $names)
  trap 'rm -rf "$work"; [ -z "$created" ] || rm -f $created' EXIT
  "$PY" -m cudal2_catalog.codegen --names $names
  "$PY" -m build_tools.kernel_lib --names $names --cache-dir "$cache" --out "$work/candidates.so"
fi
tar czf "$OUT" -C "$work" build/kernel_cache
echo "prebuild_kernels: $(ls "$cache" | wc -l) objects for $TORCH_CUDA_ARCH_LIST in $OUT"
