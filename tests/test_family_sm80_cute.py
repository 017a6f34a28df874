"""CPU tests of the sm80_cute family: feasibility rules, rendering, names, and one nvcc compile."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from cudal2_catalog import codegen
from cudal2_catalog.config import HgemmConfig
from cudal2_catalog.families import sm80_cute

BASE = HgemmConfig(family="sm80_cute", dtype="fp16", layout="nt", tile_m=128, tile_n=128, tile_k=32, stages=4,
                   warps=4)


def with_(**changes) -> HgemmConfig:
    return dataclasses.replace(BASE, **changes)


@pytest.mark.parametrize("cfg", sm80_cute.default_configs(), ids=lambda c: c.name)
@pytest.mark.parametrize("arch", [80, 90])
def test_defaults_feasible(cfg, arch):
    assert sm80_cute.feasible(cfg, arch) == (True, "")


def test_default_set_covers_dtypes_and_layouts():
    configs = sm80_cute.default_configs()
    assert 8 <= len(configs) <= 16
    assert len({c.name for c in configs}) == len(configs)
    assert {(c.dtype, c.layout) for c in configs} == {(d, l) for d in ("fp16", "bf16") for l in ("nn", "nt")}


@pytest.mark.parametrize("cfg, arch, reason", [
    (with_(tile_k=16), 80, "tile_k"),
    (with_(tile_k=128), 90, "tile_k"),
    (with_(warps=3), 80, "warps"),
    (with_(warps=2), 80, "accumulators"),
    (with_(stages=1), 80, "stages"),
    (with_(stages=7), 90, "stages"),
    (with_(cluster_n=2), 90, "cluster"),
    (with_(tile_m=48), 80, "warp grid"),
    (with_(tile_n=96), 80, "multiple of 64"),
    (with_(tile_n=48, tile_m=16, warps=1), 80, "multiple of 64"),
    (with_(tile_m=64, tile_n=32, warps=8), 80, "K-major B copy"),
    (with_(layout="nn", tile_m=64, tile_n=32, warps=8), 80, "N-major B copy"),
    (with_(tile_m=16, tile_n=16, warps=2), 80, "warp grid"),
    (with_(tile_m=32, warps=8, tile_n=128), 80, "A copy"),
    (with_(tile_m=256, tile_n=256, warps=4), 90, "accumulators"),
    (with_(tile_m=128, tile_n=256, warps=8, tile_k=64, stages=4), 80, "shared memory"),
    (with_(tile_m=128, tile_n=256, warps=8, tile_k=64, stages=3), 86, "shared memory"),
    (BASE, 75, "arch"),
    (BASE, 100, "arch"),
])
def test_infeasible_with_reason(cfg, arch, reason):
    ok, why = sm80_cute.feasible(cfg, arch)
    assert not ok and reason in why


@pytest.mark.parametrize("cfg", [
    with_(tile_m=16, tile_n=16, tile_k=64, warps=1),
    with_(layout="nn", tile_m=16, tile_n=32, warps=1),
    with_(tile_m=32, tile_n=32, warps=4),
    with_(layout="nn", tile_m=64, tile_n=32, tile_k=64, warps=2),
    with_(tile_m=16, tile_n=128, tile_k=64, warps=2),
], ids=lambda c: c.name)
def test_small_tiles_with_few_warps_feasible(cfg):
    assert sm80_cute.feasible(cfg, 80) == (True, "")
    assert sm80_cute.warp_grid(cfg)[0] * 16 <= cfg.tile_m and sm80_cute.warp_grid(cfg)[1] * 16 <= cfg.tile_n


def test_shared_memory_limit_depends_on_arch():
    cfg = with_(tile_m=128, tile_n=256, warps=8, tile_k=64, stages=5)  # 240 KiB: too big even on sm90
    assert not sm80_cute.feasible(cfg, 90)[0]
    cfg = with_(tile_m=128, tile_n=256, warps=8, tile_k=64, stages=4)  # 192 KiB: sm90 only
    assert sm80_cute.feasible(cfg, 90)[0] and not sm80_cute.feasible(cfg, 80)[0]


def test_feasible_is_pure():
    cfg = with_(stages=5)
    assert sm80_cute.feasible(cfg, 90) == sm80_cute.feasible(cfg, 90)
    assert cfg == with_(stages=5)


def test_render_is_deterministic_and_names_the_config():
    text = codegen.render(BASE)
    assert text == codegen.render(BASE)
    assert f"CUDAL2_SM80_CUTE_KERNEL({BASE.name}, cutlass::half_t, /*B_N_MAJOR=*/false, 128, 128, 32, 4, 4)" in text
    nn_bf16 = codegen.render(with_(layout="nn", dtype="bf16"))
    assert "cutlass::bfloat16_t, /*B_N_MAJOR=*/true" in nn_bf16


def test_render_rejects_infeasible():
    with pytest.raises(ValueError, match="tile_k"):
        codegen.render(with_(tile_k=16))


@pytest.mark.parametrize("cfg", sm80_cute.default_configs(), ids=lambda c: c.name)
def test_name_round_trip(cfg):
    assert HgemmConfig.from_name(cfg.name) == cfg
    assert cfg.arch_dir == "sm80"


def test_generated_sources_are_current():
    for cfg in sm80_cute.default_configs():
        path = codegen.KERNELS_DIR / cfg.arch_dir / f"{cfg.name}.cu"
        assert path.exists() and path.read_text() == codegen.render(cfg), f"regenerate {path.name}"


@pytest.mark.parametrize("cfg", [
    with_(layout="nn", tile_m=64, tile_n=64, tile_k=64, stages=3),
    with_(layout="nn", tile_m=16, tile_n=32, tile_k=32, warps=1, stages=4),  # small tile: 32-wide N-major atoms
], ids=lambda c: c.name)
def test_compiles_for_sm80_without_spills(tmp_path, kernel_toolchain, cfg):
    """Representative configs compile for sm_80 with no register spills and no local memory."""
    from build_tools import kernel_lib

    nvcc, flags = kernel_lib.nvcc_path(), kernel_lib.common_flags()
    src = tmp_path / f"{cfg.name}.cu"
    src.write_text(codegen.render(cfg))
    cmd = [nvcc, *flags, "-gencode=arch=compute_80,code=sm_80", "-Xptxas=-v", "-c", str(src), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "gemm_kernel" in log
    for line in log.splitlines():
        if "spill" in line:
            assert "0 bytes spill stores, 0 bytes spill loads" in line, line
        if "stack frame" in line:
            assert line.strip().startswith("0 bytes stack frame"), line
