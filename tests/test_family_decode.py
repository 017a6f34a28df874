"""CPU tests of the `decode` kernel family: feasibility, rendering, names, and one nvcc compile."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from build_tools import kernel_lib
from cudal2_catalog import codegen
from cudal2_catalog.config import HgemmConfig
from cudal2_catalog.families import decode


def cfg(**overrides) -> HgemmConfig:
    base = HgemmConfig("decode", "fp16", "nt", 8, 64, 128, stages=4, warps=4)
    return dataclasses.replace(base, **overrides)


def test_defaults_cover_every_m_on_sm80_and_sm90():
    configs = decode.default_configs()
    assert 1 <= len(configs) <= 16
    assert len({c.name for c in configs}) == len(configs)
    for arch in (80, 90):
        usable = [c for c in configs if decode.feasible(c, arch)[0]]
        covered = {(c.dtype, c.layout, c.tile_m) for c in usable}
        for dtype in ("fp16", "bf16"):
            assert {m for d, l, m in covered if d == dtype and l == "nt"} == {8, 16, 32, 64}, arch
            assert (dtype, "nn", 64) in covered, arch
    assert all(decode.feasible(c, 90)[0] for c in configs)


@pytest.mark.parametrize("overrides, reason", [
    (dict(tile_m=12), "tile_m"),
    (dict(tile_m=128), "tile_m"),
    (dict(tile_n=24), "tile_n"),
    (dict(tile_n=512), "tile_n"),
    (dict(tile_k=48), "tile_k"),
    (dict(stages=1), "stages"),
    (dict(stages=0), "stages"),
    (dict(warps=3), "warps"),
    (dict(warps=0), "warps"),
    (dict(tile_n=48, warps=2), "divide or be a multiple"),
    (dict(tile_n=16, tile_k=32, warps=4), "warps along K"),
    (dict(tile_m=64, tile_n=256, tile_k=256, stages=8), "shared memory"),
    (dict(cluster_n=2), "sm90_tma_ws fields"),
    (dict(schedule="coop"), "sm90_tma_ws fields"),
    (dict(swap_ab=True), "sm90_tma_ws fields"),
])
def test_infeasible_configs_are_rejected_with_a_reason(overrides, reason):
    ok, why = decode.feasible(cfg(**overrides), 90)
    assert not ok and reason in why


def test_arch_range_and_smem_limits():
    assert decode.feasible(cfg(), 75)[0] is False
    assert decode.feasible(cfg(), 100)[0] is False
    big = cfg(tile_m=64, tile_n=128, tile_k=128, stages=4, warps=8)  # ~209 KiB: fits sm_90, not sm_80
    assert decode.feasible(big, 90)[0] and not decode.feasible(big, 80)[0]


def test_warp_grid_and_smem_model():
    assert decode.warp_grid(cfg(tile_n=128, warps=8)) == (8, 1, 1)
    assert decode.warp_grid(cfg(tile_n=128, warps=4)) == (4, 1, 2)
    assert decode.warp_grid(cfg(tile_n=32, warps=8)) == (2, 4, 1)
    # stage = W [64][128+8] + X [8][128+8] halves
    assert decode.smem_bytes(cfg()) == 4 * (64 * 136 + 8 * 136) * 2
    assert decode.smem_bytes(cfg(layout="nn")) == 4 * (128 * 72 + 8 * 136) * 2


def test_render_is_deterministic_and_names_the_kernel():
    c = cfg(dtype="bf16", layout="nn")
    text = codegen.render(c)
    assert text == codegen.render(c)
    assert f"CUDAL2_DECODE_KERNEL({c.name}, __nv_bfloat16, false, 8, 64, 128, 4, 4)" in text
    assert "torch" not in text


def test_name_round_trip():
    for c in decode.default_configs():
        assert HgemmConfig.from_name(c.name) == c
        assert c.arch_dir == "sm80"


def test_generated_sources_match_render():
    for c in decode.default_configs():
        path = codegen.KERNELS_DIR / c.arch_dir / f"{c.name}.cu"
        assert path.exists() and path.read_text() == codegen.render(c), f"regenerate {path}"


def test_one_config_compiles_without_spills(tmp_path, kernel_toolchain):
    c = cfg(tile_m=16)
    src = codegen.write_kernel(c, tmp_path)
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-gencode=arch=compute_90,code=sm_90",
           "-Xptxas", "-v", "-c", str(src), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "spill stores" in proc.stderr
    assert all(" 0 bytes spill" in line for line in proc.stderr.splitlines() if "spill" in line)
