"""A kernel library built with nvcc on this machine loads through both loaders (ctypes and the C++ registry) and
its index describes its kernels; no GPU needed."""
import pytest

import cudal2_ops
from build_tools import kernel_lib
from cudal2_testing.kernel_library import KernelLibrary

NAME = "decode_fp16_nt_16x64x128_s4_w4"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if kernel_lib.toolchain_problem() is not None:
        pytest.skip(kernel_lib.toolchain_problem())
    out = tmp_path_factory.mktemp("lib") / "libk.so"
    assert kernel_lib.build_library([NAME], out, ["90"], cache_dir=out.parent / "cache", progress=lambda _: None) \
        == [NAME]
    return out


def test_ctypes_loader_reads_the_index(library):
    lib = KernelLibrary(library)
    assert "90" in lib.archs  # sm_90 code of the sm80-folder kernel
    kernel = lib.kernels[NAME]
    assert (kernel.family, kernel.layout, kernel.sm_min, kernel.sm_max) == ("decode", "nt", 80, 90)
    # Shape and alignment answers need the device's shared-memory size (a GPU); a null descriptor does not.
    assert kernel._desc.can_implement(None) == 4  # CUDAL2_BAD_ARGUMENT


@pytest.mark.skipif(not cudal2_ops.is_compiled(), reason="compiled extension not built")
def test_cpp_registry_loads_the_library(library):
    from cudal2_ops._extension import _C

    assert _C.load_kernel_library(str(library)) == 1
    info = _C.kernel_info(NAME)
    assert (info["family"], info["dtype"], info["layout"]) == ("decode", "fp16", "nt")
    assert str(library) in _C.kernel_libraries()
    with pytest.raises(RuntimeError, match="not a cudal2 kernel library|cannot load"):
        _C.load_kernel_library("/nonexistent/libnothing.so")
