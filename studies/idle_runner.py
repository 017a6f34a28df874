"""Whether an idle candidate runner changes the judge's baseline times.

The judge keeps a runner that passed a config candidate for the next batch (`search.eval_worker`), also while a new
problem's baseline (cuBLASLt-autotune) is timed: the runner then waits on its pipe, no region mapped, no work queued,
its CUDA context alive. This times each problem's baseline through the judge's own path (`GpuEvaluator.judge`, a
batch of one passing config candidate with no baseline document) in rounds, once with the kept runner alive
("beside") and once with no runner process ("alone", the kept one killed first), the order alternating by round.
Per problem it reports the median over rounds of beside / alone (each round's median over the cases) against the
round-to-round spread of each mode alone (the noise floor).

    CUDA_VISIBLE_DEVICES=0 python -m studies.idle_runner --out OUT/idle_runner.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from studies.report_files import write_report

PROBLEMS = ((128, 128, 64), (512, 64, 256), (1024, 256, 512), (1024, 64, 1024), (512, 512, 1024), (2048, 512, 4096))
MODES = ("beside", "alone")


def ratio(a: list[float], b: list[float]) -> float:
    """The median over cases of a / b."""
    return statistics.median(x / y for x, y in zip(a, b))


def summarize(samples: list[dict]) -> list[dict]:
    """Per problem: the median, least and largest over rounds of beside / alone, and the largest round-to-round
    change of either mode alone (|ratio - 1| of consecutive rounds), from samples {"problem", "round", "mode", "us"}."""
    by = {(s["problem"], s["round"], s["mode"]): s["us"] for s in samples}
    rows = []
    for problem in dict.fromkeys(s["problem"] for s in samples):
        rounds = sorted({r for p, r, _ in by if p == problem})
        pairs = [ratio(by[problem, r, "beside"], by[problem, r, "alone"]) for r in rounds
                 if (problem, r, "beside") in by and (problem, r, "alone") in by]
        drift = [abs(ratio(by[problem, r, mode], by[problem, q, mode]) - 1)
                 for mode in MODES for q, r in zip(rounds, rounds[1:])
                 if (problem, r, mode) in by and (problem, q, mode) in by]
        if pairs:
            rows.append({"problem": problem, "rounds": len(pairs), "median": statistics.median(pairs),
                         "least": min(pairs), "largest": max(pairs), "noise": max(drift, default=0.0)})
    return rows


def report_lines(rows: list[dict], environment: dict) -> list[str]:
    lines = ["# An idle candidate runner and the judge's baseline",
             "",
             f"{environment.get('gpu_name')}, commit {environment.get('commit')}; `python -m studies.idle_runner`. "
             "Baseline (cuBLASLt-autotune, kernel mode, the judge's own path) timed with the kept runner idle "
             "(beside) and with no runner (alone), alternating by round; beside / alone per round is the median over "
             "the problem's cases; noise: the largest round-to-round change of either mode alone.",
             "",
             "| problem | rounds | beside / alone, median | least | largest | noise |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['problem']} | {r['rounds']} | {r['median']:.3f} | {r['least']:.3f} | {r['largest']:.3f} | "
              f"{r['noise']:.3f} |" for r in rows]
    return lines


def measure(rounds: int) -> tuple[list[dict], dict]:
    """The baselines of PROBLEMS (fp16 NT) in both modes for `rounds` rounds, and the judge's environment."""
    import torch  # noqa: PLC0415 (GPU only)

    from search.backends.local import nvcc_archs  # noqa: PLC0415
    from search.candidate import OK, Candidate, Problem  # noqa: PLC0415
    from search.candidate_space import check  # noqa: PLC0415
    from search.compile_farm import installed_kernels  # noqa: PLC0415
    from search.eval_worker import GpuEvaluator  # noqa: PLC0415

    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    kernels = installed_kernels(nvcc_archs(arch))
    judge = GpuEvaluator()
    work = {}
    for m, n, k in PROBLEMS:
        problem = Problem("nt", "fp16", m, n, k)
        fitting = [name for name in sorted(kernels) if name.startswith(("sm90_tma_ws_fp16_nt", "sm80_cute_fp16_nt"))
                   and check(Candidate(config=name, provenance="study"), problem, arch)[0]]
        if fitting:
            work[problem] = Candidate(config=fitting[0], provenance="study")
    samples = []
    for round_ in range(rounds):
        for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
            for problem, cand in work.items():
                if mode == "alone" and judge.kept_runner is not None:
                    judge.kept_runner.close()
                    judge.kept_runner = None
                if mode == "beside" and judge.kept_runner is None:   # a runner to keep: judged once, not timed here
                    list(judge.judge(request(problem, cand, kernels)))
                result, = judge.judge(request(problem, cand, kernels))
                if result.status != OK:
                    raise RuntimeError(f"{cand.config} on {problem.key}: {result.status} {result.reason[:300]}")
                samples.append({"problem": problem.key, "round": round_, "mode": mode,
                                "us": result.baseline_cases["us"]})
    return samples, judge.environment


def request(problem, cand, kernels: dict) -> dict:
    """A batch of one candidate with no baseline document (the judge times the baseline)."""
    return {"problem": problem.__dict__, "cases": 3, "timeout_s": 120.0, "baseline": None,
            "candidates": [{"candidate": cand.to_json(), "artifact": str(kernels[cand.config])}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.idle_runner", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True, help="Markdown report; its JSON beside it")
    args = parser.parse_args(argv)
    from cudal2_testing.measure import env  # noqa: PLC0415

    samples, judge_environment = measure(args.rounds)
    environment = {**env.header(sys.argv), **judge_environment}
    rows = summarize(samples)
    write_report(args.out, report_lines(rows, environment), {"environment": environment, "samples": samples,
                                                             "summary": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
