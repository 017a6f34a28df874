"""scripts/prebuild_kernels.sh: objects for the library and for named candidates in one tarball, keyed as the GPU
host's build keys them, and no generated candidate source left behind."""
import os
import subprocess
import tarfile
from pathlib import Path

from build_tools import kernel_lib

REPO = Path(__file__).resolve().parent.parent
LIBRARY_KERNEL, CANDIDATE = "tiny_fp16_nn_32x32x64_s6_w8", "tiny_fp16_nt_32x32x32_s3_w1"


def test_prebuilt_objects_carry_the_build_keys(tmp_path, kernel_toolchain):
    candidate_source = REPO / "kernels" / "sm80" / f"{CANDIDATE}.cu"
    assert not candidate_source.exists()
    out = tmp_path / "kc.tgz"
    env = {**os.environ, "CUDAL2_KERNELS": LIBRARY_KERNEL, "CANDIDATES": CANDIDATE, "TORCH_CUDA_ARCH_LIST": "9.0a"}
    proc = subprocess.run([str(REPO / "scripts" / "prebuild_kernels.sh"), str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not candidate_source.exists()
    with tarfile.open(out) as tar:
        objects = {Path(m.name).name for m in tar.getmembers() if m.name.endswith(".o")}
    library_object = kernel_lib.object_path(kernel_lib.find_source(LIBRARY_KERNEL), ["9.0a"], tmp_path)
    assert library_object.name in objects and len(objects) == 2
    assert any(name.startswith(CANDIDATE + "-") for name in objects)
