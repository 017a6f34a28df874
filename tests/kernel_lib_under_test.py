"""The kernel library the GPU kernel-family tests check through ctypes.

`$CUDAL2_TEST_KERNEL_LIB` when set (cudal2_ops itself never reads it: it loads its bundled library plus
`CUDAL2_KERNEL_LIBS`; the old name `CUDAL2_KERNEL_LIB`, one letter away, is still read, with a warning), else the
library the build installed beside the package (`cudal2_ops/libcudal2_kernels.so`). A GPU run with neither fails
loudly: kernel tests that all skipped would prove nothing.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

ENV = "CUDAL2_TEST_KERNEL_LIB"
OLD_ENV = "CUDAL2_KERNEL_LIB"


def installed_library() -> Path | None:
    """The kernel library the build installed beside cudal2_ops, if there is one."""
    from cudal2_ops._extension import KERNEL_LIB  # noqa: PLC0415 (the package's own path for its library)

    return KERNEL_LIB if KERNEL_LIB.exists() else None


def kernel_lib_path() -> str | None:
    """`$CUDAL2_TEST_KERNEL_LIB` (else the old `$CUDAL2_KERNEL_LIB`, warning), else the installed library, else None."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    if os.environ.get(OLD_ENV):
        warnings.warn(f"{OLD_ENV} is renamed {ENV} (it was easy to confuse with CUDAL2_KERNEL_LIBS, the extra "
                      f"libraries cudal2_ops loads); set {ENV} instead", FutureWarning, stacklevel=2)
        return os.environ[OLD_ENV]
    installed = installed_library()
    return str(installed) if installed else None


def library_under_test() -> str:
    """The library a GPU run of the kernel-family tests checks; RuntimeError (the tests fail) when there is none."""
    path = kernel_lib_path()
    if path is None:
        raise RuntimeError(f"no kernel library to test: {ENV} is not set and the build installed none beside "
                           "cudal2_ops (it was built with CUDAL2_SKIP_KERNELS=1, or not at all); set "
                           f"{ENV}=PATH of a library built with python -m build_tools.kernel_lib, or rebuild with "
                           "pip install --no-build-isolation -e .")
    return path
