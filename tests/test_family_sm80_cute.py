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
    (with_(tile_n=40, tile_m=16, warps=1), 80, "warp grid"),
    (with_(reg_pipeline=3), 80, "tile_k 32 has 2"),
    (with_(reg_pipeline=4, tile_k=64), 80, "reg_pipeline 4 not in"),
    (with_(reg_pipeline=3, tile_k=64), 90, "registers"),
    (with_(smem_prefetch=3), 80, "smem_prefetch 3 must be 1..stages-2 = 2"),
    (with_(stages=2, smem_prefetch=1), 90, "smem_prefetch"),
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


@pytest.mark.parametrize("cfg", [
    with_(tile_n=96),                                         # 32-wide N atoms
    with_(layout="nn", tile_m=160, tile_n=64),                # tile_m 160: "BM=160 for M=8192"
    with_(layout="nn", tile_m=48, tile_n=96, tile_k=64, warps=2),
    with_(tile_m=16, tile_n=48, warps=1),                     # 16-wide N atoms
], ids=lambda c: c.name)
def test_tiles_that_are_not_powers_of_two_feasible(cfg):
    assert sm80_cute.feasible(cfg, 80) == (True, "")
    assert cfg.tile_n % sm80_cute.n_atom_width(cfg) == 0


def test_register_estimate_bounds_the_deeper_register_pipeline():
    """reg_pipeline 3 adds a k-block of fragments: refused where the estimate passes 255, kept where it does not;
    the default's estimate never refuses (the 128x128x32 default is at the limit)."""
    deep = with_(tile_k=64, reg_pipeline=3)
    assert sm80_cute.estimated_registers(deep) > sm80_cute.MAX_REGISTERS >= sm80_cute.estimated_registers(
        with_(tile_k=64, reg_pipeline=1))
    assert not sm80_cute.feasible(deep, 90)[0]
    assert sm80_cute.feasible(with_(tile_k=64, reg_pipeline=1), 90) == (True, "")
    assert sm80_cute.feasible(with_(tile_m=64, tile_n=64, tile_k=64, reg_pipeline=3), 90) == (True, "")
    assert sm80_cute.feasible(with_(tile_k=64), 90) == (True, "")


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


def test_default_render_is_the_original_source():
    """Code-level fields at their defaults generate the source the family always generated (kernel names and the
    shipped tables stay valid; the kernel's machine code is unchanged)."""
    cfg = sm80_cute.default_configs()[0]
    assert not sm80_cute.has_code_fields(cfg)
    assert sm80_cute.render(cfg) == (
        '#include "cudal2/sm80_cute.cuh"\n\nCUDAL2_SM80_CUTE_KERNEL(sm80_cute_fp16_nn_64x64x64_s3_w4, cutlass::half_t, '
        '/*B_N_MAJOR=*/true, 64, 64, 64, 4, 3)\n')
    assert sm80_cute.render(with_(splitk="workspace")).count("CUDAL2_SM80_CUTE_KERNEL_SPLITK(") == 1


@pytest.mark.parametrize("changes, suffix, arguments", [
    (dict(reg_pipeline=1), "_r1", "kAuto, /*REG_PIPELINE=*/1, /*SMEM_PREFETCH=*/3, /*STAGGER_AB=*/false, kSmem"),
    (dict(smem_prefetch=2), "_p2", "kAuto, /*REG_PIPELINE=*/2, /*SMEM_PREFETCH=*/2, /*STAGGER_AB=*/false, kSmem"),
    (dict(stagger_ab=True), "_stagger", "/*STAGGER_AB=*/true, kSmem"),
    (dict(epilogue="nosmem"), "_nosmem", "/*STAGGER_AB=*/false, kDirect"),
    (dict(epilogue="nosmem", splitk="workspace", reg_pipeline=1, smem_prefetch=1, stagger_ab=True),
     "_nosmem_workspace_r1_p1_stagger", "kWorkspace, /*REG_PIPELINE=*/1, /*SMEM_PREFETCH=*/1, /*STAGGER_AB=*/true, kDirect"),
])
def test_code_fields_name_and_render(changes, suffix, arguments):
    cfg = with_(**changes)
    assert cfg.name == BASE.name + suffix
    assert HgemmConfig.from_name(cfg.name) == cfg
    assert sm80_cute.feasible(cfg, 80) == (True, "")
    text = codegen.render(cfg)
    assert f"CUDAL2_SM80_CUTE_KERNEL_CODE({cfg.name}, cutlass::half_t, /*B_N_MAJOR=*/false, 128, 128, 32, 4, 4, " in text
    assert text.rstrip().endswith(arguments + ")")


def test_code_variants_cover_every_code_level_value():
    """The named candidates of the GPU tests: feasible on sm80 and sm90, canonical names, none in the default set,
    every off-default value of each code-level field, both dtypes and layouts, and tiles that are not powers of two."""
    configs = [HgemmConfig.from_name(name) for name in sm80_cute.CODE_VARIANTS]
    assert all(sm80_cute.feasible(cfg, arch) == (True, "") for cfg in configs for arch in (80, 90))
    assert not set(sm80_cute.CODE_VARIANTS) & {cfg.name for cfg in codegen.default_configs()}
    for field, values in sm80_cute.SPACE.items():
        if field in sm80_cute.CODE_DEFAULTS:
            assert {getattr(cfg, field) for cfg in configs} == set(values), field
    assert {(cfg.dtype, cfg.layout) for cfg in configs} == {(d, l) for d in ("fp16", "bf16") for l in ("nn", "nt")}
    assert {cfg.tile_m for cfg in configs} >= {48, 160} and {cfg.tile_n for cfg in configs} >= {96}


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
    # every code-level path: no register pipelining, shallow prefetch, staggered B copies, stores from registers,
    # with 32-wide N-major atoms of a 96-wide tile; then the deeper register pipeline
    with_(layout="nn", tile_m=48, tile_n=96, tile_k=32, warps=2, stages=3, reg_pipeline=1, smem_prefetch=1,
          stagger_ab=True, epilogue="nosmem"),
    with_(tile_m=64, tile_n=64, tile_k=64, stages=4, reg_pipeline=3, smem_prefetch=2, stagger_ab=True),
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
