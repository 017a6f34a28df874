"""benchmarks.profile_small without a GPU: reading ncu's raw CSV and mapping its launches to problems."""
from benchmarks import profile_small

HEADER = ('"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size",'
          '"smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",'
          '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
          '"smsp__average_warp_latency_issue_stalled_wait.ratio"')
UNITS = '"","","nsecond","","","",""'


def launch(i: int, name: str, ns: str, grid: str) -> str:
    return f'"{i}","{name}","{ns}","{grid}","{i + 0.5}","{2 * i}","0.25"'


def test_raw_rows_skip_the_units_row_and_ncu_chatter():
    text = "\n".join(["==PROF== Connected to process 1", HEADER, UNITS, launch(0, "move_kernel(...)", "1,510", "64"),
                      "==PROF== Disconnected"])
    rows = profile_small.raw_rows(text)
    assert len(rows) == 1 and rows[0]["Kernel Name"] == "move_kernel(...)"
    summary = profile_small.launch_summary(rows[0])
    assert summary["duration"] == 1510.0 and summary["grid"] == 64.0
    assert list(summary["top_stalls"]) == ["long_scoreboard", "wait", "barrier"]  # largest first


def test_launches_map_to_problems_by_kernel_name():
    text = "\n".join([HEADER, UNITS,
                      launch(0, "move_kernel", "1500", "8"), launch(1, "sm90_xmma_gemm_f16", "2300", "16"),
                      launch(2, "void tiny_gemm_kernel<__half, Traits>", "1900", "4"),
                      launch(3, "move_kernel", "1600", "8"), launch(4, "sm90_xmma_gemm_splitk", "2000", "32"),
                      launch(5, "splitKreduce_kernel", "900", "8")])
    launches = [profile_small.launch_summary(r) for r in profile_small.raw_rows(text)]
    manifest = [{"key": "nn_fp16_64_64_64", "tiny": {"kernel": "tiny_fp16_nn_32x32x64_s6_w8"}},
                {"key": "nt_fp16_64_128_4096", "tiny": None}]
    problems = profile_small.assign(launches, manifest)
    assert [p["key"] for p in problems] == ["nn_fp16_64_64_64", "nt_fp16_64_128_4096"]
    assert problems[0]["tiny"]["duration"] == 1900.0 and len(problems[0]["cublaslt"]) == 1
    assert "tiny" not in problems[1] and [x["duration"] for x in problems[1]["cublaslt"]] == [2000.0, 900.0]
    assert "cuBLASLt 2.90 us in 2 kernel(s)" in profile_small.problem_line(problems[1])
