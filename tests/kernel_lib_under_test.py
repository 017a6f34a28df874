"""The kernel library the GPU kernel-family tests check through ctypes: `$CUDAL2_TEST_KERNEL_LIB`.

cudal2_ops itself never reads it (it loads its bundled library plus `CUDAL2_KERNEL_LIBS`). The old name
`CUDAL2_KERNEL_LIB`, one letter away from `CUDAL2_KERNEL_LIBS`, is still read, with a warning.
"""
from __future__ import annotations

import os
import warnings

ENV = "CUDAL2_TEST_KERNEL_LIB"
OLD_ENV = "CUDAL2_KERNEL_LIB"


def kernel_lib_path() -> str | None:
    """The library path from `$CUDAL2_TEST_KERNEL_LIB` (else the old `$CUDAL2_KERNEL_LIB`, warning), or None."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    if os.environ.get(OLD_ENV):
        warnings.warn(f"{OLD_ENV} is renamed {ENV} (it was easy to confuse with CUDAL2_KERNEL_LIBS, the extra "
                      f"libraries cudal2_ops loads); set {ENV} instead", FutureWarning, stacklevel=2)
        return os.environ[OLD_ENV]
    return None
