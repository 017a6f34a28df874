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


# --- weight streams (decode_weight_stream.cuh) ---------------------------------------------------------------------

def scfg(stream: str, **overrides) -> HgemmConfig:
    return dataclasses.replace(cfg(**overrides), weight_stream=stream)


def test_default_set_keeps_the_cp_async_stream_and_its_macro():
    for c in decode.default_configs():
        assert c.weight_stream == ""
        body = codegen.render(c)
        assert "CUDAL2_DECODE_KERNEL(" in body and "STREAM" not in body


@pytest.mark.parametrize("stream, enumerator", [("tma", "kTma"), ("evictfirst", "kCpAsyncEvictFirst")])
def test_stream_render_names_the_enumerator(stream, enumerator):
    c = scfg(stream, dtype="bf16", tile_n=128)
    assert decode.render(c).endswith(
        f"CUDAL2_DECODE_STREAM_KERNEL({c.name}, __nv_bfloat16, true, 8, 128, 128, 4, 4, {enumerator})\n")


@pytest.mark.parametrize("stream, overrides, arch, reason", [
    ("tma", {}, 80, "compute capability 90"),
    ("tma", dict(tile_k=32), 90, "tile_k (32) to be a multiple of 64"),
    ("tma", dict(layout="nn", tile_n=48, warps=1), 90, "tile_n (48) to be a multiple of 64"),
])
def test_weight_stream_feasibility(stream, overrides, arch, reason):
    ok, why = decode.feasible(scfg(stream, **overrides), arch)
    assert not ok and reason in why


def test_unknown_weight_stream_is_refused():
    try:
        c = scfg("bulk")
    except ValueError as e:  # HgemmConfig validates its weight_stream field itself
        assert "weight_stream" in str(e)
        return
    ok, why = decode.feasible(c, 90)
    assert not ok and "weight_stream must be one of" in why


def test_weight_stream_feasible_cases():
    assert decode.feasible(scfg("evictfirst"), 80)[0]
    assert decode.feasible(scfg("tma"), 90)[0]
    assert decode.feasible(scfg("tma", layout="nn", tile_n=128, tile_k=32, warps=8), 90)[0]


def test_tma_smem_model():
    # W dense [64][128] + X [8][128+8], rounded up to 1 KiB; 1 KiB alignment room; 4 mbarriers
    stage = -(-(64 * 128 + 8 * 136) * 2 // 1024) * 1024
    assert decode.smem_bytes(scfg("tma")) == 1024 + 4 * stage + 4 * 8
    assert decode.smem_bytes(scfg("evictfirst")) == decode.smem_bytes(cfg())
    # the fp32 cluster tile [tile_m][tile_n] can exceed a small pipeline
    small = cfg(tile_m=64, tile_n=256, tile_k=32, stages=2, warps=16)
    assert decode.smem_bytes(small) == 64 * 256 * 4


SMEM_CHECK_CONFIGS = [  # (stream, overrides): defaults' shapes, both layouts, a cluster-tile-bound and a reduce-bound
    ("", {}), ("tma", {}), ("evictfirst", {}), ("tma", dict(layout="nn", tile_n=128, warps=8)),
    ("tma", dict(tile_m=64, tile_n=256, tile_k=64, stages=5, warps=8)), ("", dict(tile_m=64, tile_n=256, tile_k=32,
                                                                                 stages=2, warps=16)),
    ("tma", dict(tile_m=64, tile_n=256, tile_k=64, stages=2, warps=16)), ("", dict(tile_n=16, tile_k=256, warps=16)),
]


def test_smem_model_matches_the_template(tmp_path, kernel_toolchain):
    """Traits::kSmemBytes equals smem_bytes() for each config (static_asserts compiled by nvcc, no kernel built)."""
    lines = ['#include "cudal2/decode_kernel.cuh"', "using cudal2::decode::Traits;",
             "using cudal2::decode::WeightStream;"]
    for stream, overrides in SMEM_CHECK_CONFIGS:
        c = scfg(stream, **overrides)
        traits = (f"Traits<{decode.LAYOUT_NT[c.layout]}, {c.tile_m}, {c.tile_n}, {c.tile_k}, {c.stages}, {c.warps}, "
                  f"WeightStream::{decode.WEIGHT_STREAMS[stream]}>")
        lines.append(f'static_assert({traits}::kSmemBytes == {decode.smem_bytes(c)}, "{c.name}");')
    src = tmp_path / "smem_check.cu"
    src.write_text("\n".join(lines) + "\n")
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-gencode=arch=compute_90,code=sm_90", "-c", str(src),
           "-o", str(tmp_path / "smem_check.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_weight_stream_candidates():
    """Twins of the default set with non-default streams, all feasible on sm_90, whose names parse back."""
    defaults = decode.default_configs()
    found = decode.weight_stream_candidates()
    names = [c.name for c in found]
    assert len(set(names)) == len(names) and not set(names) & {c.name for c in defaults}
    assert all(decode.feasible(c, 90)[0] and c.weight_stream in ("tma", "evictfirst") for c in found)
    for c in defaults:  # every default shape has both twins (all default W tiles are whole 64-element boxes)
        assert dataclasses.replace(c, weight_stream="tma") in found
        assert dataclasses.replace(c, weight_stream="evictfirst") in found
    assert all(HgemmConfig.from_name(c.name) == c for c in found)


def test_stream_configs_compile_without_spills(tmp_path, kernel_toolchain):
    """One translation unit with a TMA (nt fp16, nn bf16) and an evict-first kernel, for sm_80 and sm_90."""
    configs = [scfg("tma", tile_n=128, warps=8), scfg("tma", dtype="bf16", layout="nn", tile_m=64, tile_n=128,
                                                           stages=3, warps=8), scfg("evictfirst", tile_m=16)]
    src = tmp_path / "streams.cu"
    src.write_text("".join(decode.render(c) for c in configs))
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-gencode=arch=compute_80,code=sm_80",
           "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v", "-c", str(src), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "decode_gemm_tma_kernel" in proc.stderr and "for 'sm_90'" in proc.stderr
    assert all(" 0 bytes spill" in line for line in proc.stderr.splitlines() if "spill" in line)
    assert "warning" not in proc.stderr.lower(), proc.stderr[-4000:]
