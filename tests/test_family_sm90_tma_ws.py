"""CPU tests of the `sm90_tma_ws` family: feasibility rules, rendering, names, and one real sm_90a compile."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from build_tools import kernel_lib
from cudal2_catalog import codegen
from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families import sm90_tma_ws as fam

BASE = HgemmConfig("sm90_tma_ws", "fp16", "nt", 128, 256, 64, stages=0, cluster_m=2, cluster_n=1, schedule="coop",
                   scheduler="persistent")
# The small-problem pingpong default with the epilogue that stores from registers (no smem staging, no TMA store).
NOSMEM = HgemmConfig("sm90_tma_ws", "fp16", "nt", 64, 128, 64, schedule="pingpong", scheduler="persistent",
                     epilogue="nosmem")


def variant(**changes) -> HgemmConfig:
    return dataclasses.replace(BASE, **changes)


@pytest.mark.parametrize("cfg", fam.default_configs(), ids=lambda c: c.name)
def test_defaults_feasible(cfg: HgemmConfig) -> None:
    assert fam.feasible(cfg, 90) == (True, "")


@pytest.mark.parametrize("cfg", [
    variant(tile_m=256, tile_n=128),
    variant(tile_m=128, tile_n=128, tile_k=128, stages=3),
    variant(tile_m=64, tile_n=256, schedule="pingpong"),
    variant(tile_m=128, tile_n=128, schedule="pingpong", cluster_m=1, cluster_n=2),
    variant(tile_n=112, scheduler="streamk", cluster_m=1),
    variant(tile_k=32, stages=6),
    variant(tile_m=128, tile_n=16, cluster_m=2, cluster_n=2),
    variant(cluster_m=4),
    variant(cluster_m=4, cluster_n=2),
    variant(tile_m=64, tile_n=16, tile_k=128, schedule="pingpong", cluster_m=1, swap_ab=True),
    variant(tile_m=128, tile_n=8, tile_k=128, cluster_m=1, scheduler="streamk", swap_ab=True),
    NOSMEM,
    variant(tile_m=64, tile_n=16, tile_k=128, schedule="pingpong", cluster_m=1, swap_ab=True, epilogue="nosmem"),
    variant(tile_n=128, cluster_m=1, cluster_n=2, epilogue="nosmem"),
], ids=lambda c: c.name)
def test_accepts_good(cfg: HgemmConfig) -> None:
    assert fam.feasible(cfg, 90) == (True, "")


@pytest.mark.parametrize("cfg, arch, why", [
    (BASE, 80, "compute capability 90"),
    (BASE, 100, "compute capability 90"),
    (variant(tile_m=256, tile_n=64, schedule="pingpong"), 90, "pingpong needs tile_m"),
    (variant(schedule="pingpong"), 90, "accumulators"),
    (variant(tile_m=64), 90, "coop needs tile_m"),
    (variant(tile_m=64, tile_n=128, schedule="pingpong", scheduler="streamk"), 90, "cooperative schedule"),
    (variant(tile_n=264), 90, "tile_n"),
    (variant(tile_n=40), 90, "tile_n"),
    (variant(tile_k=256), 90, "tile_k"),
    (variant(tile_m=256, tile_n=256), 90, "accumulators"),
    (variant(cluster_m=8), 90, "cluster"),
    (variant(cluster_m=4, cluster_n=4), 90, "portable"),
    (variant(tile_m=64, tile_n=16, schedule="pingpong", cluster_m=4), 90, "multicast"),
    (variant(cluster_n=3), 90, "cluster"),
    (variant(stages=1), 90, "stages"),
    (variant(stages=5), 90, "shared memory"),
    (variant(schedule=""), 90, "schedule"),
    (variant(scheduler="splitk"), 90, "scheduler"),
    (variant(warps=8), 90, "warps"),
    (variant(tile_n=8), 90, "multiple of 16"),
    (variant(tile_n=16, swap_ab=True, layout="nn"), 90, "nt layout"),
    (variant(tile_n=12, swap_ab=True), 90, "multiple of 8"),
    (variant(tile_n=128, scheduler="streamk", epilogue="nosmem"), 90, "persistent scheduler only"),
    (variant(splitk="workspace"), 90, "splitk"),
    (HgemmConfig("sm80_cute", "fp16", "nt", 128, 128, 32, stages=3, warps=4), 90, "family"),
])
def test_rejects_bad(cfg: HgemmConfig, arch: int, why: str) -> None:
    ok, reason = fam.feasible(cfg, arch)
    assert not ok and why in reason, reason


def test_shared_memory_model() -> None:
    """128x256x64: 48 KiB per stage, 4 auto stages fit next to the epilogue, 5 do not."""
    assert fam.stage_bytes(BASE) == 48 * 1024
    assert fam.auto_stages(BASE) == 4
    assert fam.epilogue_tile(BASE) == (128, 32)
    assert fam.epilogue_tile(variant(tile_m=64, tile_n=48, schedule="pingpong")) == (64, 16)


def test_nosmem_epilogue_gives_its_shared_memory_to_stages() -> None:
    """64x64x64 pingpong: 16 KiB per stage; 13 fit beside the TMA epilogue's staged D and bias row, 14 without."""
    nosmem = dataclasses.replace(NOSMEM, tile_n=64)
    tma = dataclasses.replace(nosmem, epilogue="")
    assert fam.epilogue_smem_bytes(nosmem) == fam.BARRIER_BYTES < fam.epilogue_smem_bytes(tma)
    assert (fam.auto_stages(tma), fam.auto_stages(nosmem)) == (13, 14)


def test_nosmem_epilogue_renders_its_template_argument() -> None:
    assert fam.gemm_type(NOSMEM).endswith(", 0, false, cudal2::sm90::EpilogueKind::kNoSmem>")
    swapped = variant(tile_m=64, tile_n=16, schedule="pingpong", cluster_m=1, swap_ab=True, epilogue="nosmem")
    assert fam.gemm_type(swapped).endswith(", 0, true, cudal2::sm90::EpilogueKind::kNoSmem>")
    assert NOSMEM.name.endswith("_pingpong_persistent_nosmem")


def test_render_is_deterministic_and_complete() -> None:
    for cfg in fam.default_configs():
        text = codegen.render(cfg)
        assert text == codegen.render(cfg)
        assert '#include "cudal2/sm90_tma_ws.cuh"' in text
        assert f"CUDAL2_EXPORT_KERNEL({cfg.name}, \"sm90_tma_ws\", 90, 90," in text
        assert text.count(fam.gemm_type(cfg)) == 2
        assert "torch" not in text


def test_swapped_operands_render_and_default_set() -> None:
    """Swapped kernels pass SwapAB = true to the template; each dtype has some for nn.Linear at small M."""
    swapped = [c for c in fam.default_configs() if c.swap_ab]
    assert {c.dtype for c in swapped} == {"fp16", "bf16"} and {c.layout for c in swapped} == {"nt"}
    assert all(c.tile_n <= 32 and c.name.endswith("_swap") for c in swapped)
    assert fam.gemm_type(swapped[0]).endswith(", 0, true>")
    assert fam.gemm_type(BASE).endswith(", 0>")


def test_render_refuses_infeasible() -> None:
    with pytest.raises(ValueError, match="not feasible"):
        codegen.render(variant(tile_k=256))


def test_names_round_trip_and_default_set() -> None:
    configs = fam.default_configs()
    assert 8 <= len(configs) <= 26  # each (two CUTLASS GEMMs) costs about 80 s of nvcc on one of CI's 2 cores
    assert len({c.name for c in configs}) == len(configs)
    assert {(c.dtype, c.layout) for c in configs} == {(d, l) for d in ("fp16", "bf16") for l in ("nn", "nt")}
    for cfg in configs:
        assert HgemmConfig.from_name(cfg.name) == cfg


def test_default_set_has_the_standard_hopper_configs() -> None:
    """fp16 on both layouts: 128x256 coop 1x2, 256x128 coop 2x1 (large squares) and 128x128 pingpong 1x2 (mid)."""
    names = {c.name for c in fam.default_configs()}
    for layout in ("nt", "nn"):
        assert {f"sm90_tma_ws_fp16_{layout}_128x256x64_s0_c1x2_coop_persistent",
                f"sm90_tma_ws_fp16_{layout}_256x128x64_s0_c2x1_coop_persistent",
                f"sm90_tma_ws_fp16_{layout}_128x128x64_s0_c1x2_pingpong_persistent"} <= names


def test_committed_tables_kernels_are_generated_and_built() -> None:
    """Every sm90 kernel a committed table names is a feasible config whose committed source is exactly codegen's
    output (not hand-edited), and the extension build compiles it (tables' kernels plus the default set)."""
    built = kernel_lib.table_kernel_names() | kernel_lib.default_kernel_names()
    for path in codegen.KERNELS_DIR.glob("sm90/*.json"):
        used = {e.get("kernel", "") for e in json.loads(path.read_text())["entries"].values()}  # or cuBLASLt
        for name in sorted(k for k in used if k.startswith(fam.FAMILY)):
            assert name in built, (path, name)
            cfg = HgemmConfig.from_name(name)
            assert fam.feasible(cfg, 90)[0], (path, name)
            assert (codegen.KERNELS_DIR / cfg.arch_dir / f"{name}.cu").read_text() == codegen.render(cfg), name


def test_knob_grid_adds_splits_only_for_stream_k() -> None:
    streamk = variant(tile_n=128, cluster_m=1, scheduler="streamk")
    persistent_grid = fam.knob_grid(BASE, 4096, 4096, 4096)
    assert len(persistent_grid) == len(fam.KNOB_SWIZZLES) * len(fam.KNOB_RASTERS)
    assert all(k.splits == 0 and k.swizzle and k.raster for k in persistent_grid)
    assert fam.knob_grid(streamk, 4096, 4096, 4096) == persistent_grid + [Knobs(splits=s) for s in (1, 2, 4)]


def test_generated_sources_are_current() -> None:
    """The committed kernels/sm90 sources equal what codegen renders now."""
    for cfg in fam.default_configs():
        path = codegen.KERNELS_DIR / cfg.arch_dir / f"{cfg.name}.cu"
        assert path.read_text() == codegen.render(cfg), f"{path} is stale: regenerate it"


def cuobjdump_path() -> str | None:
    """cuobjdump from PATH, $CUDA_HOME/bin, or the copy bundled with triton."""
    found = shutil.which("cuobjdump") or shutil.which("/usr/local/cuda/bin/cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("triton")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    return None


@pytest.mark.parametrize("cfg", [BASE, NOSMEM], ids=lambda c: c.name)
def test_compiles_to_hgmma(kernel_toolchain, cfg: HgemmConfig, tmp_path: Path) -> None:
    """Compiles representative kernels (TMA and no-smem epilogues) for sm_90a (cached objects reused; C7510 fails
    the build) and checks their SASS uses HGMMA. Sources go to a temporary folder, never into kernels/."""
    from build_tools import kernel_lib

    cuobjdump = cuobjdump_path()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found")
    obj = kernel_lib.compile_object(codegen.write_kernel(cfg, tmp_path), ["90a"], kernel_lib.DEFAULT_CACHE_DIR)
    sass = subprocess.run([cuobjdump, "--dump-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA" in sass
    assert "sm_90a" in sass
