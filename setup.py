"""Build of cudal2_ops: the torch extension `cudal2_ops._C` and the torch-free kernel library.

    pip install --no-build-isolation -e .            # scripts/install.sh does this, with visible progress

Where torch has no CUDA or nvcc is missing, the pure-Python package is installed and every call runs torch.
Environment: TORCH_CUDA_ARCH_LIST (default: the visible GPU, else "8.0;9.0a"), MAX_JOBS, CUDAL2_KERNELS
(comma-separated wildcards of kernel names to build), CUDAL2_SKIP_KERNELS=1 (extension only), CUTLASS_DIR.
"""
from __future__ import annotations

import os
import shutil
import site
import sys
import time
import warnings
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from build_tools import build_estimate, kernel_lib, requirements  # noqa: E402 (repository-local build helpers)

VERSION = "0.1.0"
KERNEL_LIB_NAME = "libcudal2_kernels.so"


def find_cuda_home() -> str | None:
    """CUDA_HOME, else /usr/local/cuda, else the parent of nvcc's folder (None without nvcc)."""
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").exists():
            return candidate
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


def pip_cuda_dir() -> Path | None:
    """site-packages/nvidia/cu13 (cuBLAS headers and libraries shipped with torch's CUDA wheels), if present."""
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        for name in ("cu13", "cu12"):
            path = Path(sp) / "nvidia" / name
            if (path / "include" / "cublasLt.h").exists():
                return path
    return None


def cublas_include_dir(cuda_home: str) -> list[str]:
    """Compiler flags exposing the cuBLAS/cuSPARSE headers torch includes: the toolkit's if it has them, else the pip
    wheel's folder searched after the system paths (it also holds CUDA runtime headers of another minor version,
    which must not shadow the toolkit's)."""
    if (Path(cuda_home) / "include" / "cublasLt.h").exists():
        return []
    pip_dir = pip_cuda_dir()
    if pip_dir is None:
        raise RuntimeError("cuBLAS headers not found in the CUDA toolkit nor in site-packages/nvidia/cu13")
    return ["-idirafter", str(pip_dir / "include")]


def cublas_link_args(cuda_home: str) -> list[str]:
    """Linker flags for cuBLAS/cuBLASLt: the toolkit's libraries, else the wheel's by their versioned names."""
    lib64 = Path(cuda_home) / "lib64"
    if (lib64 / "libcublasLt.so").exists():
        return [f"-L{lib64}", "-lcublasLt", "-lcublas"]
    pip_dir = pip_cuda_dir()
    if pip_dir is None:
        raise RuntimeError("libcublasLt not found in the CUDA toolkit nor in site-packages/nvidia/cu13/lib")
    lib = pip_dir / "lib"
    names = sorted(p.name for p in lib.glob("libcublas*.so.*"))
    return [f"-L{lib}"] + [f"-l:{n}" for n in names if n.startswith(("libcublasLt.so.", "libcublas.so."))]


def default_arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST, else the visible GPU's arch (9.0 -> 9.0a), else "8.0;9.0a"."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}{'a' if major == 9 else ''}"
    return kernel_lib.DEFAULT_ARCHS


def extension_modules() -> tuple[list, dict]:
    """The CUDA extension and the build_ext command, or nothing (pure-Python install) without a CUDA toolchain."""
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    except ImportError:
        warnings.warn("cudal2: torch is not installed; installing the pure-Python package (calls will fail to import "
                      "torch). Install torch first, then reinstall with --no-build-isolation.")
        return [], {}
    cuda_home = find_cuda_home()
    if torch.version.cuda is None or cuda_home is None:
        warnings.warn("cudal2: no CUDA toolchain (torch without CUDA or nvcc missing): the compiled extension is not "
                      "built and every cudal2_ops call runs torch.")
        return [], {}
    os.environ.setdefault("CUDA_HOME", cuda_home)
    os.environ.setdefault("MAX_JOBS", str(kernel_lib.default_jobs()))  # torch's ninja build reads it too
    arch_list = default_arch_list()
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list.replace("9.0a", "9.0")  # the binding has no device code

    class BuildWithKernels(BuildExtension):
        """Builds the kernel library (content-hash cached objects) next to the extension, then the extension."""

        def finalize_options(self) -> None:
            """Keeps ninja's objects in build/ between builds: pip's editable build otherwise hands build_ext a new
            temporary folder each time, and every binding source was compiled again (about 70 s on 2 cores)."""
            super().finalize_options()
            self.build_temp = str(ROOT / "build" / f"extension-{sys.implementation.cache_tag}")

        def run(self) -> None:
            package_dir = ROOT / "cudal2_ops" if self.inplace else Path(self.build_lib) / "cudal2_ops"
            self.copy_tables(package_dir)
            if os.environ.get("CUDAL2_SKIP_KERNELS") == "1":
                print("cudal2: CUDAL2_SKIP_KERNELS=1: no kernel library; every CUDA fp16/bf16 call runs cuBLASLt",
                      flush=True)
            else:
                names = kernel_lib.select_kernel_names(os.environ.get("CUDAL2_KERNELS"))
                linked = kernel_lib.build_library(names, package_dir / KERNEL_LIB_NAME,
                                                  kernel_lib.parse_arch_list(arch_list))
                print(f"cudal2: {len(linked)} kernels in {package_dir / KERNEL_LIB_NAME} for {arch_list}", flush=True)
            jobs = int(os.environ["MAX_JOBS"])
            print(f"cudal2: building the binding cudal2_ops._C ({len(sources)} C++ sources, {jobs} jobs; from scratch "
                  f"about {kernel_lib.format_seconds(build_estimate.binding_seconds(len(sources), jobs))}, "
                  "later only what changed)", flush=True)
            start = time.monotonic()
            super().run()
            print(f"cudal2: binding built in {kernel_lib.format_seconds(time.monotonic() - start)}", flush=True)

        @staticmethod
        def copy_tables(package_dir: Path) -> None:
            """Tables are package data: kernels/<arch>/<gpu>.json -> cudal2_ops/tables/<arch>/<gpu>.json."""
            for table in kernel_lib.KERNELS_DIR.glob("*/*.json"):
                target = package_dir / "tables" / table.parent.name / table.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(table, target)

    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.cpp"))
    ext = CUDAExtension(
        name="cudal2_ops._C",
        sources=sources,
        include_dirs=[str(ROOT / "csrc"), str(ROOT / "csrc" / "include")],
        extra_compile_args={"cxx": ["-O3", *cublas_include_dir(cuda_home)]},
        # libstdc++ named explicitly: where only its static archive is visible to the linker (seen on the lent GPU
        # image), g++ would otherwise copy it into the extension, whose iostreams then crash.
        extra_link_args=["-l:libstdc++.so.6"] + cublas_link_args(cuda_home) + ["-ldl"],
    )
    return [ext], {"build_ext": BuildWithKernels}


INSTALLED_PACKAGES = ("cudal2_ops", "cudal2_catalog", "cudal2_testing", "search", "benchmarks", "studies")
ext_modules, cmdclass = extension_modules()

setup(
    name="cudal2_ops",
    version=VERSION,
    description="Tuned fp16/bf16 GEMM kernels for NVIDIA GPUs with a cuBLASLt-backed dispatcher",
    # The user package plus the kernel catalog, the testing helpers, the search, the benchmarks and the studies, so
    # that `python -m search` (and the others) run from any folder after the install.
    packages=find_packages(include=[name for top in INSTALLED_PACKAGES for name in (top, f"{top}.*")]),
    package_data={"cudal2_ops": [KERNEL_LIB_NAME, "tables/*/*.json"], "cudal2_testing": ["measure/llm_shapes.json"],
                  "search": ["llm/gpu_memory.md"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    python_requires=">=3.10",
    install_requires=requirements.CORE,
    extras_require=requirements.EXTRAS,
)
