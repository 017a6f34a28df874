"""The tuner's CPU parts: problems and problems files, the run summary, the CLI without a GPU."""

import json

import pytest

from cudal2_ops import tune
from cudal2_ops.tune import Problem


def test_problem_key_and_validation():
    assert Problem("nt", "bf16", 1, 4096, 14336).key == "nt_bf16_1_4096_14336"
    for bad in (("tn", "fp16", 1, 1, 1), ("nn", "fp32", 1, 1, 1), ("nn", "fp16", 0, 1, 1)):
        with pytest.raises(ValueError):
            Problem(*bad)


def test_problems_file_merges_and_sorts(tmp_path):
    path = tmp_path / "sub" / "p.json"
    tune.write_problems(path, [Problem("nt", "fp16", 8, 64, 64)])
    merged = tune.write_problems(path, [Problem("nn", "fp16", 1, 2, 3), Problem("nt", "fp16", 8, 64, 64)])
    assert merged == [Problem("nn", "fp16", 1, 2, 3), Problem("nt", "fp16", 8, 64, 64)]
    assert tune.read_problems(path) == merged


@pytest.mark.parametrize("text,needle", [
    ("{not json", "not a readable problems file"),
    ('[["nt", "fp16", 1, 2, 3]]', "not a problems file"),
    ('{"format": "cudal2-problems-1", "problems": [["nt", "fp16", 1.5, 2, 3]]}', "problem 0"),
    ('{"format": "cudal2-problems-1", "problems": [["nt", "fp16", true, 2, 3]]}', "problem 0"),
    ('{"format": "cudal2-problems-1", "problems": [["nt", "fp16", 1, 2]]}', "problem 0"),
    ('{"format": "cudal2-problems-1", "problems": [["xx", "fp16", 1, 2, 3]]}', "layout must be"),
])
def test_bad_problems_files_are_named_errors(tmp_path, text, needle):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=needle):
        tune.read_problems(path)


def test_choice_of_tells_kernels_and_configurations_apart():
    lt = {"cublaslt": {"algo_id": 1, "tile": 2}}
    assert tune.choice_of(lt) == tune.choice_of({"cublaslt": {"tile": 2, "algo_id": 1}})
    assert tune.choice_of(lt) != tune.choice_of({**lt, "kernel": "k"})
    assert tune.choice_of({"kernel": "k", "splits": 2}) != tune.choice_of({"kernel": "k", "splits": 4})


def test_summary_reports_what_changed():
    s = tune.Summary(tuned=3, kernels=1, new=2, changed=1, over_heuristic=[1.0, 1.21, 1.0], seconds=4,
                     unsupported=["nn_fp16_1_1_1"])
    text = "\n".join(s.lines())
    assert "tuned 3 problems" in text and "1 choose a cudal2 kernel, 2 a cuBLASLt configuration" in text
    assert "2 new entries, 1 changed choices, 1 without" in text and "geomean 1.066x" in text


def test_cli_without_a_gpu_says_so(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path = tmp_path / "p.json"
    tune.write_problems(path, [Problem("nt", "fp16", 8, 64, 64)])
    assert tune.main(["--problems", str(path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_cli_rejects_a_bad_margin(tmp_path):
    with pytest.raises(SystemExit) as exc:
        tune.main(["--problems", str(tmp_path / "p.json"), "--margin", "-1"])
    assert exc.value.code == 2


def test_fastest_retimes_the_heuristic_choice_in_interleaved_rounds(monkeypatch):
    """A first pass that put the heuristic's configuration outside the fastest few must not drop it: it is re-timed
    with the finalists, in rounds that each start one finalist later, and chosen when it is the fastest."""
    true_us = {0: 5.0, 1: 6.0, 2: 6.5, 3: 7.0}   # config id -> time on re-timing; 0 is the heuristic's choice
    calls: list[int] = []

    def fake_graph_time_us(fn, target_us=150.0, replays=5):
        return true_us[fn()]

    monkeypatch.setattr(tune, "graph_time_us", fake_graph_time_us)
    timed = [tune.Timed(9.0, config=[0]), tune.Timed(4.0, config=[1]), tune.Timed(4.5, config=[2]),
             tune.Timed(4.8, config=[3])]          # noisy first pass: the heuristic's looked slowest

    def run(c):
        calls.append(c.config[0])
        return c.config[0]

    ranked = tune.fastest(timed, run, retime=2, always=timed[0])
    assert [c.config[0] for c in ranked] == [0, 1, 2, 3]
    assert ranked[0].us == 5.0 and ranked[3].us == 4.8            # not a finalist: its first-pass time stays
    assert calls == [1, 2, 0, 2, 0, 1, 0, 1, 2][:3 * tune.RETIME_ROUNDS]
    calls.clear()
    fresh = [tune.Timed(9.0, config=[0]), tune.Timed(4.0, config=[1]), tune.Timed(4.5, config=[2])]
    assert [c.config[0] for c in tune.fastest(fresh, run, retime=2)] == [1, 2, 0]   # without `always`: dropped
    assert 0 not in calls


def fake_cublaslt(monkeypatch, times: dict[int, float], wrong: set[int]) -> None:
    """A problem whose cuBLASLt candidates are configurations [i] * 9 timed at `times[i]`, those in `wrong` writing
    wrong results (the tuner's CPU stand-in for the extension and the GPU)."""
    import types

    from cudal2_ops import _extension

    fake_c = types.SimpleNamespace(tuning=types.SimpleNamespace(lt_candidates=lambda *a: [[i] * 9 for i in times]))
    monkeypatch.setattr(_extension, "_C", fake_c)
    monkeypatch.setattr(tune, "graph_time_us", lambda fn, target_us=150.0, replays=5: times[fn()])

    class FakeRun:
        a = b = out = None

        def run_config(self, config):
            return config[0]

        def correct(self, run):
            return run() not in wrong

    monkeypatch.setattr(tune.ProblemRun, "make", classmethod(lambda cls, problem, seed=0: FakeRun()))


def test_a_heuristic_choice_that_fails_the_check_is_neither_chosen_nor_recorded_as_faster(monkeypatch):
    """The heuristic's configuration (candidate 0) is the fastest but writes wrong results: the entry holds the fastest
    correct configuration and no heuristic time below it (the loader would otherwise skip the entry for the heuristic)."""
    fake_cublaslt(monkeypatch, {0: 2.0, 1: 3.0, 2: 4.0}, wrong={0})
    entry = tune.tune_problem(Problem("nt", "fp16", 64, 64, 64), [], tune.DEFAULT_MARGIN)
    assert entry["cublaslt"]["algo_id"] == 1 and entry["cublaslt_us"] == 3.0
    assert "cublaslt_heuristic_us" not in entry


def test_near_ties_of_the_chosen_configuration_are_recorded_in_the_table(monkeypatch, tmp_path):
    """Re-timed configurations within NEAR_TIE of the chosen one and correct are recorded beside it, fastest first
    (`cublaslt_near`: the dispatcher times them against it at a problem's first eager call on the user's card); a
    slower one or a wrong one is not; the written table keeps them."""
    fake_cublaslt(monkeypatch, {0: 3.0, 1: 3.12, 2: 3.5, 3: 3.06, 4: 3.05}, wrong={3})   # 3 near, but wrong
    entry = tune.tune_problem(Problem("nt", "fp16", 64, 64, 64), [], tune.DEFAULT_MARGIN)
    assert entry["cublaslt"]["algo_id"] == 0 and entry["cublaslt_us"] == 3.0
    assert entry["cublaslt_near"] == [{"cublaslt": dict.fromkeys(entry["cublaslt"], 4), "cublaslt_us": 3.05},
                                      {"cublaslt": dict.fromkeys(entry["cublaslt"], 1), "cublaslt_us": 3.12}]
    monkeypatch.setattr(tune, "table_header", lambda device, header: {"gpu": "test"})
    written = tune.merge_into(tmp_path / "t.json", 0, {"nt_fp16_64_64_64": entry}, None)
    assert written["entries"]["nt_fp16_64_64_64"] == entry
    assert json.loads((tmp_path / "t.json").read_text()) == written
    monkeypatch.setattr(tune, "table_header", lambda device, header: {"tuned": "2026-11-26T23:42:37Z"})
    named = tune.merge_into(tmp_path / "t.json", 0, {}, written, name_run=True)  # one stamp names the run
    assert named["header"] == {"tuned": "2026-11-26T23:42:37Z", "search_run": "tune-2026-11-26T23:42:37Z"}


def test_a_kernel_that_loses_by_the_margin_is_recorded_but_not_chosen(monkeypatch):
    """A kernel 2% faster than the best configuration does not clear the 3% margin: the entry runs the configuration
    and records the kernel as `fastest_kernel` (its name, knobs and time: a near miss told from a kernel far behind);
    one 5% faster is chosen and nothing else is recorded."""
    fake_cublaslt(monkeypatch, {0: 3.0, 1: 3.2}, wrong=set())
    kernel_times = {"k_near": 2.94, "k_far": 4.0, "k_fast": 2.85}
    monkeypatch.setattr(tune.ProblemRun, "make", classmethod(lambda cls, problem, seed=0: KernelRun()))
    monkeypatch.setattr(tune, "graph_time_us", lambda fn, target_us=150.0, replays=5: fn())

    class KernelRun:
        a = b = out = None

        def run_config(self, config):
            return {0: 3.0, 1: 3.2}[config[0]]

        def run_kernel(self, name, knobs):
            return kernel_times[name]

        def correct(self, run):
            return True

    problem = Problem("nt", "fp16", 64, 64, 64)
    near = tune.tune_problem(problem, [("k_far", tune.DEFAULT_KNOBS), ("k_near", tune.DEFAULT_KNOBS)], 0.03)
    assert "kernel" not in near and near["cublaslt_us"] == 3.0
    assert near["fastest_kernel"] == {"kernel": "k_near", **tune.DEFAULT_KNOBS.to_dict(), "us": 2.94}
    chosen = tune.tune_problem(problem, [("k_near", tune.DEFAULT_KNOBS), ("k_fast", tune.DEFAULT_KNOBS)], 0.03)
    assert chosen["kernel"] == "k_fast" and chosen["kernel_us"] == 2.85 and "fastest_kernel" not in chosen


def test_the_base_tables_kernel_keeps_its_entry_within_the_hold_margin():
    """Hysteresis: a kernel must beat the configuration by the margin to take an entry, but the one the base table
    already runs keeps it while it beats the configuration by HOLD_MARGIN (and passes the check); another kernel as
    fast is not held, nor the incumbent at other knobs, nor one that fails the check or no longer wins by the hold."""
    knobs, split = tune.DEFAULT_KNOBS, tune.Knobs(splits=2)
    config_us = 3.0
    held_us = config_us / (1 + tune.HOLD_MARGIN) - 0.01        # inside the hold, outside the 3% margin
    ranked = [tune.Timed(held_us, kernel="other"), tune.Timed(held_us + 0.001, kernel="mine", knobs=knobs)]
    every = lambda c: True   # noqa: E731
    assert tune.chosen_kernel(ranked, config_us, 0.03, None, every) is None
    assert tune.chosen_kernel(ranked, config_us, 0.03, ("mine", knobs), every) is ranked[1]
    assert tune.chosen_kernel(ranked, config_us, 0.03, ("mine", split), every) is None
    assert tune.chosen_kernel(ranked, config_us, 0.03, ("mine", knobs), lambda c: c.kernel != "mine") is None
    slower = [tune.Timed(config_us / (1 + tune.HOLD_MARGIN) + 0.01, kernel="mine", knobs=knobs)]
    assert tune.chosen_kernel(slower, config_us, 0.03, ("mine", knobs), every) is None
    fast = [tune.Timed(2.8, kernel="other"), *ranked]            # one clears the margin: it takes the entry
    assert tune.chosen_kernel(fast, config_us, 0.03, ("mine", knobs), every) is fast[0]


def test_tune_holds_the_base_entrys_kernel(monkeypatch):
    """Through tune(): a problem whose base entry runs kernel k at 2% under the best configuration keeps k; without the
    base entry the same timings give the configuration."""
    fake_cublaslt(monkeypatch, {0: 3.0}, wrong=set())
    monkeypatch.setattr(tune, "graph_time_us", lambda fn, target_us=150.0, replays=5: fn())
    monkeypatch.setattr(tune, "runnable_kernels", lambda layout, dtype: ["k"])

    class KernelRun:
        a = b = out = None

        def run_config(self, config):
            return 3.0

        def run_kernel(self, name, knobs):
            return 2.94

        def correct(self, run):
            return True

    monkeypatch.setattr(tune.ProblemRun, "make", classmethod(lambda cls, problem, seed=0: KernelRun()))
    problem = Problem("nt", "fp16", 64, 64, 64)
    base = {problem.key: {"kernel": "k", **tune.DEFAULT_KNOBS.to_dict(), "cublaslt_us": 3.1}}
    held, _ = tune.tune([problem], base, progress=False)
    assert held[problem.key]["kernel"] == "k" and held[problem.key]["kernel_us"] == 2.94
    fresh, _ = tune.tune([problem], {}, kernels_mode="all", progress=False)
    assert "kernel" not in fresh[problem.key] and fresh[problem.key]["fastest_kernel"]["kernel"] == "k"
