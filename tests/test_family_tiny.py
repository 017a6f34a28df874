"""CPU tests of the `tiny` kernel family: feasibility, names, rendering, knob grid, the default set, and nvcc compiles
of one fp16 NT and one bf16 NN instance for the library's sm80-folder targets."""
from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess

import pytest

from build_tools import kernel_lib
from cudal2_catalog import codegen, space
from cudal2_catalog.config import ARCH_DIR, FAMILIES, HgemmConfig, Knobs
from cudal2_catalog.families import knob_grid, tiny


def cfg(**overrides) -> HgemmConfig:
    base = HgemmConfig("tiny", "fp16", "nt", 64, 64, 64, stages=3, warps=8)
    return dataclasses.replace(base, **overrides)


def test_registered_as_an_sm80_folder_family():
    assert "tiny" in FAMILIES and ARCH_DIR["tiny"] == "sm80"
    assert "tiny" in space.families_for(80) and "tiny" in space.families_for(90)
    assert "tiny" not in space.families_for(100)


@pytest.mark.parametrize("overrides, reason", [
    (dict(tile_m=8), "tile_m and tile_n"),
    (dict(tile_n=96), "tile_m and tile_n"),
    (dict(tile_k=16), "tile_k"),
    (dict(tile_k=256), "tile_k"),
    (dict(stages=1), "stages"),
    (dict(stages=9), "stages"),
    (dict(warps=3), "warps must be one of"),
    (dict(warps=0), "warps must be one of"),
    (dict(warps=2), "2 warps do not fit a 64x64x64 tile: its 4 covering warps"),  # 4 warp tiles of 32x32 at least
    (dict(tile_m=128, tile_n=128, warps=8), "its 16 covering warps"),
    (dict(tile_m=16, tile_n=16, tile_k=32, warps=4), "times 1..2 K groups"),  # one 16x16 tile, 2 K steps
    (dict(tile_m=32, tile_n=32, tile_k=32, warps=16), "its 4 covering warps times 1..2"),  # 4 K groups, 2 k16 steps
    (dict(tile_m=128, tile_n=128, tile_k=128, stages=6, warps=16), "shared memory"),
    (dict(cluster_n=2), "sm90_tma_ws fields"),
    (dict(schedule="coop"), "sm90_tma_ws fields"),
    (dict(swap_ab=True), "sm90_tma_ws fields"),
    (dict(splitk="workspace"), "runtime splits knob"),
])
def test_infeasible_configs_are_rejected_with_a_reason(overrides, reason):
    ok, why = tiny.feasible(cfg(**overrides), 90)
    assert not ok and reason in why, why


def test_arch_range_and_smem_limits():
    assert tiny.feasible(cfg(), 80) == (True, "")
    assert tiny.feasible(cfg(), 90) == (True, "")
    assert tiny.feasible(cfg(), 75)[0] is False
    assert tiny.feasible(cfg(), 100)[0] is False
    big = cfg(tile_m=128, tile_n=128, tile_k=64, stages=4, warps=16)  # 147456 B of stages + 77792 B receive buffer
    assert tiny.smem_bytes(big) == 4 * 2 * 2 * 128 * 72 + (128 + 15) * 136 * 4
    assert tiny.feasible(big, 90)[0] and not tiny.feasible(big, 80)[0]


@pytest.mark.parametrize("overrides, layout", [
    (dict(), (2, 2, 2, 32, 32)),                                          # 4 covering warps, 2 K groups
    (dict(tile_m=32, tile_n=32, warps=16), (2, 2, 4, 16, 16)),            # 16x16 warp tiles, then 4 K groups
    (dict(tile_m=32, tile_n=32, warps=4), (2, 2, 1, 16, 16)),             # M x N first: no K group
    (dict(tile_m=32, tile_n=32, warps=2), (1, 2, 1, 32, 16)),             # N halves first on a tie
    (dict(tile_m=32, tile_n=64, warps=16), (1, 4, 4, 32, 16)),            # N halves on a tie; at most 4 covering
    (dict(tile_m=64, tile_n=32, tile_k=32, warps=8), (2, 2, 2, 32, 16)),  # the larger side (M) is not halved: N tie
    (dict(tile_m=16, tile_n=64, tile_k=128, warps=16), (1, 4, 4, 16, 16)),
    (dict(tile_m=128, tile_n=32, warps=4), (4, 1, 1, 32, 32)),
    (dict(tile_m=128, tile_n=128, warps=16), (4, 4, 1, 32, 32)),          # the tile needs 16 covering warps
    (dict(tile_m=16, tile_n=16, tile_k=128, warps=8), (1, 1, 8, 16, 16)),
])
def test_warp_layout_covering_warps_first(overrides, layout):
    assert tuple(tiny.warp_layout(cfg(**overrides))) == layout


def feasible_grid(arch: int = 90) -> list[HgemmConfig]:
    """Every feasible NT fp16 config of the space at 2 stages (the warp layout does not depend on the rest)."""
    shapes = itertools.product(tiny.TILE_MN, tiny.TILE_MN, tiny.TILE_K, tiny.WARPS)
    configs = [cfg(tile_m=m, tile_n=n, tile_k=k, stages=2, warps=w) for m, n, k, w in shapes]
    return [c for c in configs if tiny.feasible(c, arch)[0]]


def test_warp_layout_covers_the_tile_with_every_warp():
    for c in feasible_grid():
        layout = tiny.warp_layout(c)
        assert layout.m * layout.tile_m == c.tile_m and layout.n * layout.tile_n == c.tile_n, c.name
        assert layout.tile_m in (16, 32) and layout.tile_n in (16, 32), c.name
        assert layout.m * layout.n * layout.k == c.warps and layout.k <= c.tile_k // 16, c.name
        assert layout.m * layout.n <= tiny.MAX_COVERING_WARPS or (layout.tile_m, layout.tile_n) == (32, 32), c.name


def test_smem_model():
    # stage = A [64][64+8] + B (nt: [64][64+8]) halves; receive = warps_k 2 x (64 + 15) rows x (64 + 8) floats
    assert tiny.stage_bytes(cfg()) == (64 * 72 + 64 * 72) * 2
    assert tiny.pipeline_bytes(cfg()) == 3 * tiny.stage_bytes(cfg())
    assert tiny.receive_bytes(cfg()) == 2 * 79 * 72 * 4
    assert tiny.smem_bytes(cfg()) == tiny.pipeline_bytes(cfg()) + tiny.receive_bytes(cfg())
    nn = cfg(layout="nn", tile_n=128, tile_k=32, warps=16)  # B [32][128+8]; 4 covering warps of 32x32, 4 K groups
    assert tiny.pipeline_bytes(nn) == 3 * (64 * 40 + 32 * 136) * 2
    assert tiny.receive_bytes(nn) == 2 * 79 * 136 * 4
    # a launch's receive buffer: none with one source, else groups x splits x ceil(tile_m / splits) rows
    assert tiny.receive_bytes(cfg(), 1, 1) == 0
    assert tiny.receive_bytes(cfg(), 2, 1) == 2 * 64 * 72 * 4
    assert tiny.receive_bytes(cfg(), 1, 3) == 3 * 22 * 72 * 4


@pytest.mark.parametrize("k, splits, plan", [
    (64, 1, (1, 1, 1, 128, 64 * 72 * 2 * 2, 0)),                # one K tile: one stage, no receive buffer
    (256, 1, (4, 1, 3, 128, 3 * 64 * 72 * 2 * 2, 0)),           # K = 256 alone: no K group; 3 stages (streamed)
    (320, 1, (5, 2, 3, 256, 3 * 64 * 72 * 2 * 2 + 2 * 64 * 72 * 4, 0)),  # K > 256: 2 K groups and their receive buffer
    (4096, 16, (4, 1, 3, 128, 3 * 64 * 72 * 2 * 2 + 16 * 4 * 72 * 4, 0)),  # splits: a receive buffer, no K group
    (1000, 3, (6, 2, 3, 256, 3 * 64 * 72 * 2 * 2 + 2 * 3 * 22 * 72 * 4, 0)),
    # beyond a cluster: no receive buffer; the workspace per tile: owners x sources (splits x K groups) x rows
    (16384, 32, (8, 2, 3, 256, 3 * 64 * 72 * 2 * 2, 32 * 64 * 2 * 72 * 4)),
    (16384, 64, (4, 1, 3, 128, 3 * 64 * 72 * 2 * 2, 64 * 64 * 1 * 72 * 4)),
])
def test_launch_plan(k, splits, plan):
    assert tuple(tiny.launch_plan(cfg(), k, splits)) == plan


def test_default_set_is_latency_first():
    """Every default covers its tile with at most 4 warps unless the tile needs 16 (128x128), uses one stage and no
    receive buffer on a single K tile, and adds K groups only above MAX_WARP_CHAIN_K."""
    for c in tiny.default_configs():
        layout = tiny.warp_layout(c)
        assert layout.m * layout.n <= tiny.MAX_COVERING_WARPS or c.tile_m * c.tile_n >= 128 * 128, c.name
        short = tiny.launch_plan(c, c.tile_k, 1)
        assert (short.warp_groups, short.stages, short.smem_bytes) == (1, 1, tiny.stage_bytes(c)), c.name
        assert tiny.launch_plan(c, tiny.MAX_WARP_CHAIN_K, 1).warp_groups == 1, c.name
        assert tiny.launch_plan(c, 2 * tiny.MAX_WARP_CHAIN_K, 1).warp_groups == layout.k, c.name


def test_register_estimate_and_rule(monkeypatch):
    # 60 + accumulators of the warp tile + 5 per 16-byte cp.async chunk per covering thread + 3 per K group
    assert tiny.registers(cfg(tile_m=32, tile_n=32, tile_k=128, stages=2, warps=1)) == 60 + 32 + 5 * 32 + 3
    # 16x16 warp tiles; 512 chunks over 128 covering threads; 4 K groups
    assert tiny.registers(cfg(tile_m=32, tile_n=32, warps=16)) == 60 + 8 + 5 * 4 + 3 * 4
    assert tiny.register_cap(cfg(warps=16)) == 128 and tiny.register_cap(cfg(warps=4)) == 255
    monkeypatch.setattr(tiny, "REGISTER_FILE", 32768)  # a smaller register file: 16-warp CTAs get 64 each
    ok, why = tiny.feasible(cfg(tile_n=128, warps=16), 90)
    assert not ok and "registers per thread exceed the 64" in why


def test_render_is_deterministic_and_names_the_kernel():
    c = cfg(dtype="bf16", layout="nn")
    text = codegen.render(c)
    assert text == codegen.render(c)
    assert '#include "cudal2/tiny_gemm.cuh"' in text
    assert f"CUDAL2_TINY_KERNEL({c.name}, __nv_bfloat16, false, 64, 64, 64, 3, 8)" in text
    assert "torch" not in text
    with pytest.raises(ValueError, match="not feasible"):
        codegen.render(cfg(warps=3))


def test_name_round_trip():
    assert cfg().name == "tiny_fp16_nt_64x64x64_s3_w8"
    for c in [cfg(), cfg(dtype="bf16", layout="nn", tile_m=16, tile_n=128, tile_k=128, stages=8, warps=16),
              *tiny.default_configs()]:
        assert HgemmConfig.from_name(c.name) == c
        assert c.arch_dir == "sm80"


def test_knob_grid_lists_cluster_and_grid_splits_up_to_the_k_tiles():
    c = cfg()
    assert knob_grid(c.name, 128, 256, 64) == [Knobs(splits=1)]
    assert knob_grid(c.name, 64, 256, 4096) == [Knobs(splits=s) for s in (1, 2, 4, 8, 16, 32, 64)]
    assert knob_grid(c.name, 64, 256, 1024) == [Knobs(splits=s) for s in (1, 2, 4, 8, 16)]  # 16 K tiles
    assert knob_grid(c.name, 64, 256, 200) == [Knobs(splits=s) for s in (1, 2, 4)]  # 4 K tiles, the last partial
    assert all(s.splits in tiny.KNOB_SPACE["splits"] for s in knob_grid(c.name, 1, 1, 1 << 20))


def test_space_points_round_trip_and_check():
    c = cfg(layout="nn")
    point = space.point_of(c, Knobs(splits=16))
    assert space.parse_point(point) == (c, Knobs(splits=16))
    assert space.check(c, Knobs(splits=16), 90) == (True, "")
    assert space.check(c, Knobs(splits=64), 90) == (True, "")  # grid-wide
    assert not space.check(c, Knobs(splits=65), 90)[0]
    assert not space.check(c, Knobs(swizzle=1), 90)[0]


def test_default_set_per_dtype_and_layout():
    configs = tiny.default_configs()
    assert len({c.name for c in configs}) == len(configs)
    for dtype in ("fp16", "bf16"):
        for layout in ("nt", "nn"):
            mine = [c for c in configs if (c.dtype, c.layout) == (dtype, layout)]
            assert 1 <= len(mine) <= 4
            assert {tiny.warp_layout(c).k for c in mine} != {1}, "some default splits long K over warps"
            assert (16, 16) in {tuple(tiny.warp_layout(c))[3:] for c in mine}, "some default has 16x16 warp tiles"
    assert all(tiny.feasible(c, arch)[0] for c in configs for arch in (80, 90))
    listed = set(codegen.DEFAULT_SET_FILE.read_text().split())
    assert {c.name for c in configs} <= listed


def test_generated_sources_match_render():
    for c in tiny.default_configs():
        path = codegen.KERNELS_DIR / c.arch_dir / f"{c.name}.cu"
        assert path.exists() and path.read_text() == codegen.render(c), f"regenerate {path}"


def test_warp_layout_matches_the_template(tmp_path, kernel_toolchain):
    """The template's constexpr warp_layout (tiny_kernel.cuh) gives the Python layout for every feasible tile and warp
    count: static_asserts compiled by nvcc (no kernel instantiated)."""
    checks = []
    for c in feasible_grid():
        w = tiny.warp_layout(c)
        checks.append(f"static_assert(same(warp_layout({c.tile_m}, {c.tile_n}, {c.tile_k}, {c.warps}), "
                      f"{w.m}, {w.n}, {w.k}, {w.tile_m}, {w.tile_n}), \"{c.name}\");")
    src = tmp_path / "layouts.cu"
    src.write_text('#include "cudal2/tiny_kernel.cuh"\nusing cudal2::tiny::WarpLayout;\n'
                   "using cudal2::tiny::warp_layout;\n"
                   "constexpr bool same(WarpLayout w, int m, int n, int k, int tm, int tn) {\n"
                   "  return w.m == m && w.n == n && w.k == k && w.tile_m == tm && w.tile_n == tn;\n}\n"
                   + "\n".join(checks) + "\n")
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-arch=sm_90", "-c", str(src), "-o",
           str(tmp_path / "layouts.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert len(checks) > 100 and proc.returncode == 0, proc.stderr[-4000:]


def test_smem_model_matches_the_template(tmp_path, kernel_toolchain):
    """Traits::kSmemBytes (every stage, then the receive buffer sized for 16 splits) equals smem_bytes() for every
    feasible tile and warp count, both layouts, 2 and 8 stages: feasible() and can_implement agree; and
    Traits::smem_bytes(stages, groups, splits), what a launch asks for, equals the model's for 1 and every stage, 1 and
    the most K groups, 1, 3 and 16 splits."""
    configs = [dataclasses.replace(c, layout=layout, stages=stages) for c in feasible_grid()
               for layout in ("nt", "nn") for stages in (2, tiny.MAX_STAGES)]
    checks = []
    for c in configs:
        traits = f"Traits<{'true' if c.layout == 'nt' else 'false'}, {c.tile_m}, {c.tile_n}, {c.tile_k}, {c.stages}, {c.warps}>"
        checks.append(f"static_assert({traits}::kSmemBytes == {tiny.smem_bytes(c)}, \"{c.name}\");")
        for stages, groups, splits in itertools.product((1, c.stages), {1, tiny.warp_layout(c).k}, (1, 3, 16)):
            model = stages * tiny.stage_bytes(c) + tiny.receive_bytes(c, groups, splits)
            checks.append(f"static_assert({traits}::smem_bytes({stages}, {groups}, {splits}) == {model}, "
                          f"\"{c.name} {stages} {groups} {splits}\");")
    src = tmp_path / "smem.cu"
    src.write_text('#include "cudal2/tiny_kernel.cuh"\nusing cudal2::tiny::Traits;\n' + "\n".join(checks) + "\n")
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-arch=sm_90", "-c", str(src), "-o",
           str(tmp_path / "smem.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert len(configs) > 400 and proc.returncode == 0, proc.stderr[-4000:]


SPLIT_RULE_PROGRAM = r"""
#include <climits>
#include <cstdio>
#include "cudal2/tiny_gemm.cuh"

template <class Gemm, int kTileM, int kTileN, int kTileK>
int check(const char* name) {
  const int sizes[] = {1, 17, 64, 1000, 5000};
  const int depths[] = {8, 64, 136, 1000, 4104, 16384, 100000};
  const int requests[] = {-1, 0, 1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 64, INT_MAX};
  // (max cluster splits, concurrent clusters of 16, co-resident CTAs for a cooperative launch)
  const cudal2::tiny::ClusterLimits limits[] = {{1, 0, 0}, {8, 0, 0}, {16, 0, 0}, {16, 4, 0}, {16, 1000, 0},
                                                {16, 1000, 132}, {8, 0, 264}, {16, 1000, 20000}};
  for (int m : sizes) for (int n : sizes) for (int k : depths) for (int r : requests) for (auto lim : limits) {
    cudal2_problem p{};
    p.m = m; p.n = n; p.k = k; p.splits = r; p.sm_count = 132;
    const int s = Gemm::splits(&p, lim);
    const int k_tiles = (k + kTileK - 1) / kTileK;
    const long long tiles = static_cast<long long>((m + kTileM - 1) / kTileM) * ((n + kTileN - 1) / kTileN);
    const int per_split = (k_tiles + s - 1) / s;
    // within a cluster, or (an explicit request beyond it) grid-wide with every CTA co-resident
    const bool grid_ok = r > lim.max_splits && s <= cudal2::tiny::kMaxGridSplits && s * tiles <= lim.coresident;
    bool ok = s >= 1 && (s <= lim.max_splits || grid_ok) && s <= k_tiles && (s - 1) * per_split < k_tiles;
    if (r > 0) ok = ok && s <= r;
    if (r <= 0) {  // automatic: parts of >= kMinSplitK, no more CTAs than SMs, > 8 only when all clusters fit
      ok = ok && (s == 1 || (s <= k / cudal2::tiny::kMinSplitK && s * tiles <= 132));
      ok = ok && (s <= cudal2::kMaxClusterSplits || tiles <= lim.concurrent_16);
    }
    if (!ok) {
      std::printf("FAIL %s m=%d n=%d k=%d splits=%d limits=(%d,%d,%d): %d\n", name, m, n, k, r, lim.max_splits,
                  lim.concurrent_16, lim.coresident, s);
      return 1;
    }
  }
  return 0;
}

// Prints the plan of every (K, requested splits) of `name` on 132 SMs with clusters of 16 co-scheduled and room for
// any cooperative grid, for the Python model to compare: "name k request splits tiles_per_split warp_groups stages
// threads smem_bytes workspace_bytes_per_tile".
template <class Gemm>
void print_plans(const char* name) {
  const int depths[] = {8, 64, 128, 136, 256, 264, 320, 384, 448, 1000, 4104, 16384};
  const int requests[] = {0, 1, 2, 3, 16, 32, 64};
  for (int k : depths) for (int r : requests) {
    cudal2_problem p{};
    p.m = 64; p.n = 64; p.k = k; p.splits = r; p.sm_count = 132;
    const cudal2::tiny::LaunchPlan plan = Gemm::plan(&p, {16, 1000, 100000});
    std::printf("%s %d %d %d %d %d %d %d %d %lld\n", name, k, r, plan.splits, plan.tiles_per_split,
                plan.warp_groups, plan.stages, plan.threads, plan.smem_bytes,
                plan.workspace_floats * 4 / Gemm::output_tiles(&p));
  }
}

int main() {
  using Small = cudal2::tiny::TinyGemm<__half, cudal2::tiny::Traits<true, 32, 32, 64, 6, 8>>;
  using Row = cudal2::tiny::TinyGemm<__half, cudal2::tiny::Traits<false, 16, 64, 64, 6, 8>>;
  using Wide = cudal2::tiny::TinyGemm<__nv_bfloat16, cudal2::tiny::Traits<false, 128, 128, 32, 4, 16>>;
  if (check<Small, 32, 32, 64>("32x32x64") || check<Wide, 128, 128, 32>("128x128x32")) return 1;
  print_plans<Small>("tiny_fp16_nt_32x32x64_s6_w8");
  print_plans<Row>("tiny_fp16_nn_16x64x64_s6_w8");
  print_plans<Wide>("tiny_bf16_nn_128x128x32_s4_w16");
  std::printf("OK\n");
  return 0;
}
"""


def test_split_rule_of_the_launcher(tmp_path, kernel_toolchain):
    """TinyGemm::splits and ::plan (host code, run here without a GPU: sm_count and the cluster limits are given):
    within the device's cluster limit and the K tiles, never more than asked, no empty K part after the rebalance, and
    the automatic choice keeps kMinSplitK per part, at most one CTA per SM, above 8 only when every cluster fits; the
    plan (K tiles per CTA, K groups only above MAX_WARP_CHAIN_K, stages, threads, shared memory) is the model's
    launch_plan for the split count the launcher chose."""
    src, exe = tmp_path / "split_rule.cu", tmp_path / "split_rule"
    src.write_text(SPLIT_RULE_PROGRAM)
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), "-arch=sm_90", str(src), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = subprocess.run([str(exe)], capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines[-1] == "OK", result.stdout + result.stderr
    groups_seen = set()
    for line in lines[:-1]:
        name, *numbers = line.split()
        k, request, splits, *plan = map(int, numbers)
        model = tiny.launch_plan(HgemmConfig.from_name(name), k, splits)
        assert tuple(plan) == tuple(model), (line, model)
        groups_seen.add(model.warp_groups)
    assert len(lines) == 1 + 3 * 12 * 7 and groups_seen == {1, 2}
    assert any(int(line.split()[3]) > tiny.MAX_SPLITS for line in lines[:-1])  # grid-wide plans were compared


@pytest.mark.parametrize("overrides", [
    dict(dtype="fp16", layout="nt", tile_m=32, tile_n=32, tile_k=64, stages=6, warps=8),     # 16x16 warps, 2 K groups
    dict(dtype="bf16", layout="nn", tile_m=32, tile_n=64, tile_k=64, stages=5, warps=16),    # 32x16 warps, 4 K groups
    dict(dtype="fp16", layout="nn", tile_m=64, tile_n=64, tile_k=64, stages=4, warps=8),     # 32x32 warps, 8 chunks
    dict(dtype="fp16", layout="nn", tile_m=128, tile_n=128, tile_k=32, stages=4, warps=16),  # 32x32, no K group
    dict(dtype="bf16", layout="nt", tile_m=32, tile_n=32, tile_k=128, stages=2, warps=1),    # 32 chunks per thread
    dict(dtype="fp16", layout="nn", tile_m=16, tile_n=16, tile_k=128, stages=2, warps=8),    # 16 chunks, 8 K groups
])
def test_instances_compile_for_sm80_and_sm90_without_spills(tmp_path, kernel_toolchain, overrides):
    """The library's flags for the sm80 folder (sm_80 and sm_90 code): no error, no spill, registers within the
    estimate feasible() relies on."""
    c = cfg(**overrides)
    src = codegen.write_kernel(c, tmp_path)
    arch_flags = kernel_lib.gencode_flags("sm80", kernel_lib.parse_arch_list("8.0;9.0a"))
    assert len(arch_flags) == 2
    cmd = [kernel_lib.nvcc_path(), *kernel_lib.common_flags(), *arch_flags, "-Xptxas", "-v", "-c", str(src),
           "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    used = [int(n) for n in re.findall(r"Used (\d+) registers", proc.stderr)]
    assert len(used) >= 2, proc.stderr[-2000:]  # one kernel per target
    assert max(used) <= tiny.registers(c), used
    spills = [line for line in proc.stderr.splitlines() if "spill" in line]
    assert spills and all(" 0 bytes spill" in line for line in spills)
