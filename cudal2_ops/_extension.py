"""Loads the compiled extension `cudal2_ops._C`, the kernel libraries and configuration from the environment.

Without the extension (no CUDA toolchain at install time) every call runs torch; one warning says so.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import ModuleType

import torch  # noqa: F401  (loads libc10/libtorch, which the extension links against)

PACKAGE_DIR = Path(__file__).resolve().parent
KERNEL_LIB = PACKAGE_DIR / "libcudal2_kernels.so"

_C: ModuleType | None
try:
    from cudal2_ops import _C  # type: ignore[attr-defined,no-redef]
    IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - depends on the install
    _C = None
    IMPORT_ERROR = str(exc)

_warned = False


def env_flag(name: str) -> bool:
    """True when the environment variable `name` is set to 1/true/yes/on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def warn_fallback_once() -> None:
    """Warns once per process that the compiled extension is missing and torch runs every call."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"cudal2_ops: compiled extension not available ({IMPORT_ERROR}); every call runs torch",
                      RuntimeWarning, stacklevel=3)


def load_kernel_libraries() -> list[str]:
    """Loads the bundled kernel library and any in CUDAL2_KERNEL_LIBS (os.pathsep-separated); returns their paths."""
    if _C is None:
        return []
    paths = [KERNEL_LIB] if KERNEL_LIB.exists() else []
    paths += [Path(p) for p in os.environ.get("CUDAL2_KERNEL_LIBS", "").split(os.pathsep) if p]
    loaded = []
    for path in paths:
        try:
            _C.load_kernel_library(str(path))
            loaded.append(str(path))
        except RuntimeError as exc:
            warnings.warn(f"cudal2_ops: {exc}; its kernels are not used", RuntimeWarning, stacklevel=2)
    return loaded


def apply_env_config() -> None:
    """Reads CUDAL2_DISABLE_KERNELS, CUDAL2_TUNE, CUDAL2_PRINT_CONFIGS and CUDAL2_CONFIRM_NEAR_TIES into the
    dispatcher."""
    if _C is not None:
        _C.set_config(not env_flag("CUDAL2_DISABLE_KERNELS"), env_flag("CUDAL2_TUNE"), env_flag("CUDAL2_PRINT_CONFIGS"),
                      env_flag("CUDAL2_CONFIRM_NEAR_TIES"))


LOADED_LIBRARIES = load_kernel_libraries()
apply_env_config()
