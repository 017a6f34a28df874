"""The kernel build's time estimate (build_tools/build_estimate.py, kernel_lib's plan): measured family weights that
reproduce a measured build, and a clock that is right from the first kernel on a simulated build."""
import heapq

import pytest

from build_tools import build_estimate, kernel_lib

# The first scripts/main.sh on a clean clone at 25406cc (2 cores, no GPU, MAX_JOBS=2): 61 kernels for 8.0;9.0a in
# 19 min 32 s (issue 24): 16 decode and 17 sm80_cute kernels (the sm80 folder: two targets each), 28 sm90_tma_ws.
MEASURED_BUILD = {"decode_x": (16, 2), "sm80_cute_x": (17, 2), "sm90_tma_ws_x": (28, 1)}
MEASURED_BUILD_SECONDS = 19 * 60 + 32


def test_family_weights_reproduce_the_measured_build():
    seconds = [build_estimate.kernel_seconds(name, targets, cached=False)
               for name, (count, targets) in MEASURED_BUILD.items() for _ in range(count)]
    predicted = build_estimate.parallel_seconds(seconds, jobs=2)
    assert abs(predicted - MEASURED_BUILD_SECONDS) / MEASURED_BUILD_SECONDS < 0.10


def test_kernel_seconds_by_family_target_count_and_cache():
    decode = build_estimate.FAMILY_SECONDS["decode"]
    assert build_estimate.kernel_seconds("decode_fp16_nt_8x128x128_s4_w8", 2, cached=False) == 2 * decode
    assert build_estimate.kernel_seconds("sm90_tma_ws_fp16_nt_64x16x128_s0_c1x1_pingpong_persistent_swap", 1,
                                         cached=True) == 0
    assert build_estimate.kernel_seconds("search_written_kernel", 1, cached=False) == max(
        build_estimate.FAMILY_SECONDS.values())
    assert build_estimate.FAMILY_SECONDS["decode"] < build_estimate.FAMILY_SECONDS["sm80_cute"] < \
        build_estimate.FAMILY_SECONDS["sm90_tma_ws"]


def test_parallel_seconds_is_never_below_the_longest_item():
    assert build_estimate.parallel_seconds([], 4) == 0
    assert build_estimate.parallel_seconds([10, 10, 10, 10], 2) == 20
    assert build_estimate.parallel_seconds([50, 3, 3], 8) == 50


def test_binding_estimate_reproduces_its_measurements():
    assert build_estimate.binding_seconds(11, 2) == pytest.approx(82, abs=5)  # 1 min 22 s on 2 cores
    assert build_estimate.binding_seconds(11, 16) == pytest.approx(57, abs=5)  # 57 s on 16 cores


def simulate_build(expected: dict[str, float], slowdown: float, jobs: int) -> list[tuple[float, float]]:
    """Runs a build on a simulated machine whose compiles take `slowdown` times the expected seconds (-10% to +10%,
    item by item), longest first as build_library orders them; returns (estimated, true) seconds left at the start
    and after each finished item."""
    clock = build_estimate.BuildClock(expected, jobs)
    order = sorted(expected, key=lambda name: -expected[name])
    actual = {name: expected[name] * slowdown * (0.9 + 0.1 * (i % 3)) for i, name in enumerate(order)}
    running: list[tuple[float, str]] = []
    now = 0.0
    estimates = [(clock.seconds_left(now), now)]
    while order or running:
        while order and len(running) < jobs:
            clock.started(order[0], now)
            heapq.heappush(running, (now + actual[order[0]], order.pop(0)))
        now, name = heapq.heappop(running)
        clock.finished(name, now)
        estimates.append((clock.seconds_left(now), now))
    return [(estimate, now - at) for estimate, at in estimates]


def committed_build_weights() -> dict[str, float]:
    return {f"{name}{i}": build_estimate.kernel_seconds(name, targets, cached=False)
            for name, (count, targets) in MEASURED_BUILD.items() for i in range(count)}


def test_clock_is_right_from_the_start_on_the_measured_machine():
    estimates = simulate_build(committed_build_weights(), slowdown=1.0, jobs=2)
    for estimate, truth in estimates[:-1]:
        assert abs(estimate - truth) <= 0.15 * truth + 30, (estimate, truth)


@pytest.mark.parametrize("slowdown", [0.3, 2.0])
def test_clock_adapts_to_another_machine_from_the_first_kernel(slowdown):
    """The old estimate (mean time per finished kernel) said about 1 min left at kernel 16 of 61 when the quick
    decode kernels finished first; weighted and scaled by the speed seen, every estimate after the first finished
    kernel is within 20% (plus half a minute) of the truth."""
    estimates = simulate_build(committed_build_weights(), slowdown=slowdown, jobs=2)
    for estimate, truth in estimates[1:-1]:
        assert abs(estimate - truth) <= 0.20 * truth + 30, (estimate, truth)


def test_kernel_lib_expects_nothing_of_cached_or_untargeted_kernels(tmp_path, monkeypatch):
    sources = []
    for folder, name in (("sm80", "decode_fp16_nt_8x128x128_s4_w8"), ("sm80", "sm80_cute_fp16_nt_64x64x64_s3_w4"),
                         ("sm90", "sm90_tma_ws_fp16_nt_64x16x128_s0_c1x1_pingpong_persistent_swap")):
        (tmp_path / folder).mkdir(exist_ok=True)
        sources.append(tmp_path / folder / f"{name}.cu")
        sources[-1].write_text("// kernel\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(kernel_lib, "object_path", lambda src, archs, cache_dir: (
        cache_dir / f"{src.stem}.o" if kernel_lib.gencode_flags(src.parent.name, archs) else None))
    (cache / "sm80_cute_fp16_nt_64x64x64_s3_w4.o").write_text("cached")
    expected = kernel_lib.expected_seconds(sources, ["80", "90a"], cache)
    assert expected == {"decode_fp16_nt_8x128x128_s4_w8": 2 * build_estimate.FAMILY_SECONDS["decode"],
                        "sm80_cute_fp16_nt_64x64x64_s3_w4": 0.0,
                        "sm90_tma_ws_fp16_nt_64x16x128_s0_c1x1_pingpong_persistent_swap":
                            build_estimate.FAMILY_SECONDS["sm90_tma_ws"]}
    assert kernel_lib.expected_seconds(sources, ["80"], cache)[sources[2].stem] == 0  # sm90 needs a 9.x target
    summary = kernel_lib.plan_summary(expected, ["80", "90a"], jobs=2)
    assert summary == "3 kernels for 80;90a, 2 to compile (the rest cached or not built for these targets): about 50s " \
                      "with 2 jobs"


def test_readme_quotes_what_the_build_prints_for_the_committed_kernels(monkeypatch):
    """The README's example of the build's first line is the plan of the committed kernel set (tables + default
    set) for the default targets on 2 jobs with an empty cache: adding kernels means updating that line."""
    monkeypatch.setattr(kernel_lib, "object_path", lambda src, archs, cache_dir: (
        cache_dir / "absent.o" if kernel_lib.gencode_flags(src.parent.name, archs) else None))
    archs = kernel_lib.parse_arch_list(kernel_lib.DEFAULT_ARCHS)
    sources = [kernel_lib.find_source(name) for name in kernel_lib.select_kernel_names()]
    expected = kernel_lib.expected_seconds(sources, archs, kernel_lib.DEFAULT_CACHE_DIR / "no-such-folder")
    line = f"[kernels] building {kernel_lib.plan_summary(expected, archs, jobs=2)}"
    readme = " ".join((kernel_lib.REPO_ROOT / "README.md").read_text().split())
    assert line in readme, f"README.md should quote the build's first line as: {line}"
