"""Proposers compared at equal evaluation budgets: the curves' tables and figure, shared by the studies that make the
curves (studies.budget_replay: replayed sweep measurements; studies.budget_hardware: live on the GPU).

`curves[set][proposer]` is one list per seed of the set's geomean best speedup after b = 1, 2, ... evaluations per
problem. `start` is the first budget at which every problem of a set has been evaluated (a replayed run's curve
counts whole rounds of `RunArgs.per_round` proposals per problem; a curve by per-problem index starts at 1): the
budgets below it are not compared.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from cudal2_testing.measure.figures import save_png
from cudal2_testing.measure.summary import markdown_table
from search.loop import RunArgs


def mean_curves(by_proposer: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    """Proposer -> its curve averaged over seeds."""
    return {p: [statistics.mean(v) for v in zip(*per_seed)] for p, per_seed in by_proposer.items()}


def evals_to_reach(target: float, values: list[float], start: int = RunArgs.per_round) -> int | None:
    """The first budget b >= `start` (values[b - 1]) that reaches `target` (None if none does). Below one round's
    proposals per problem (`start`) only part of the problems have been evaluated at all."""
    return next((b for b in range(start, len(values) + 1) if values[b - 1] >= target - 1e-12), None)


def summary_rows(curves: dict, budgets: list[int]) -> list[list[str]]:
    """Markdown rows: set, proposer, mean geomean (per seed) at each budget."""
    rows = []
    for name, by_proposer in curves.items():
        for proposer, per_seed in by_proposer.items():
            rows.append([name, proposer] + [
                f"{statistics.mean(c[b - 1] for c in per_seed):.4f} "
                f"({', '.join(f'{c[b - 1]:.4f}' for c in per_seed)})" for b in budgets])
    return rows


def reach_rows(curves: dict, budgets: list[int], target: str = "random",
               start: int = RunArgs.per_round) -> list[list[str]]:
    """Markdown rows: per set and rl variant, the evaluations per problem its mean curve (over seeds) needs to reach
    `target`'s mean geomean at each budget b (from `start`, `evals_to_reach`)."""
    rows = []
    for name, by_proposer in curves.items():
        mean = mean_curves(by_proposer)
        final = len(mean[target])
        for proposer in (p for p in by_proposer if p.startswith("rl")):
            reached = [evals_to_reach(mean[target][b - 1], mean[proposer], start) for b in budgets]
            rows.append([name, proposer] + [str(r) if r else f"> {final}" for r in reached])
    return rows


def target_rows(curves: dict, near: float = 0.99, share: float = 1 / 3,
                start: int = RunArgs.per_round) -> list[list[str]]:
    """Markdown rows of the issue's target: per set and rl variant, random search's final geomean (mean curve over
    seeds, at the largest budget N), the evaluations per problem the variant's mean curve needs to reach it and
    whether that is within `share` of N, then the evaluations it and random need to reach `near` of it."""
    rows = []
    for name, by_proposer in curves.items():
        mean = mean_curves(by_proposer)
        final = len(mean["random"])
        goal = mean["random"][-1]
        random_near = evals_to_reach(near * goal, mean["random"], start)
        for proposer in (p for p in by_proposer if p.startswith("rl")):
            reached = evals_to_reach(goal, mean[proposer], start)
            met = reached is not None and reached <= final * share
            rows.append([name, proposer, f"{goal:.4f}", f"{reached} of {final}" if reached else f"> {final}",
                         f"{'yes' if met else 'no'} (<= {math.floor(final * share)})",
                         str(evals_to_reach(near * goal, mean[proposer], start) or f"> {final}"),
                         str(random_near or f"> {final}")])
    return rows


def target_table(curves: dict, start: int = RunArgs.per_round) -> list[str]:
    """The Markdown lines of `target_rows`' table."""
    final = len(next(iter(curves.values()))["random"][0])
    return markdown_table(["set", "policy", f"random at {final}", "policy reaches it at", "within a third",
                           "policy to 99%", "random to 99%"], target_rows(curves, start=start))


def plot(curves: dict, path: Path, title: str, start: int = RunArgs.per_round, bands: dict | None = None) -> None:
    """One panel per problem set: each proposer's mean curve over seeds from `start` on, with a band: `bands[set]
    [proposer]` = (low, high) per budget (e.g. a bootstrap interval) where given, else the min-max over seeds."""
    import matplotlib  # noqa: PLC0415 (only for the figure)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
    for ax, (name, by_proposer) in zip(axes[0], curves.items()):
        for proposer, per_seed in by_proposer.items():
            xs = range(start, len(per_seed[0]) + 1)
            values = list(zip(*per_seed))[start - 1:]
            ax.plot(xs, [statistics.mean(v) for v in values], label=proposer)
            low, high = (bands[name][proposer] if bands else
                         ([min(v) for v in zip(*per_seed)], [max(v) for v in zip(*per_seed)]))
            ax.fill_between(xs, low[start - 1:], high[start - 1:], alpha=0.15)
        ax.set_title(name)
        ax.set_xlabel("evaluations per problem")
        ax.set_ylabel("geomean best speedup vs cuBLASLt-autotune")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
