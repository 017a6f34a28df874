"""The order a run visits its problems in, within each round: smallest first (the store's order) or, with
`--wins-first-from STORE ...`, first the problems where those stores (another GPU's searched-table stores, say) measured
a kernel under the bar, best speedup first, then the rest smallest first.

A table's search seldom measures every problem in the device time it gets, and a round visits every problem before
the next, so the order decides which problems a cut-short search reaches. On the H100's first searched-table run (the
smallest 64-80 problems below 2^32 per dtype and layout), the H200 stores' best speedup on the same problems
correlated with the H100's at Pearson 0.83-0.88 (0.61 in bf16 NN), and 23 of the 31 problems where the H100 measured
a kernel over 1.02 of its bar were among the 40 where the H200 had (docs/DECISIONS.md, 2026-11-27). That run's policy
was fit to the same H200 stores, which steers it towards their kernels, so the agreement is not independent of the
warm start: the order is a bet on where the wins are, and every problem is still visited once the winners are. On
the H100's fp16 NT resume in this order (2026-11-27, 64 -> 272 problems), 39 of the 77 added problems the H200 had won
on got a kernel over 1.02 of the bar, 4 of the other 131; on the four cases' next resume (ee0a6cb, to 176-416 problems,
the H200's final stores first), 95 of 224 against 13 of 320.
"""
from __future__ import annotations

from search.candidate import Problem
from search.errors import UserError
from search.run_report import best_within
from search.store import is_store_file, read_store


def best_speedups(paths: list[str]) -> dict[str, float]:
    """Per problem key, the best baseline / time a correct evaluation reached in the search stores at `paths` (.sqlite
    / .db or their .gz); UserError naming a path that is not a store."""
    best: dict[str, float] = {}
    for path in paths:
        if not is_store_file(path):
            raise UserError(f"--wins-first-from {path}: not a search store (.sqlite, .db, or their .gz)")
        with read_store(path) as store:
            for key, speedup in best_within(store.evaluations()).items():
                best[key] = max(best.get(key, 0.0), speedup)
    return best


def order_problems(problems: list[Problem], wins_first_from: list[str]) -> list[Problem]:
    """`problems` (in the store's order, smallest first) with those the `wins_first_from` stores won on (a best
    speedup over 1) first, the best first; the others keep their order after them."""
    if not wins_first_from:
        return list(problems)
    best = best_speedups(wins_first_from)
    won = sorted((p for p in problems if best.get(p.key, 0.0) > 1.0), key=lambda p: -best[p.key])
    return won + [p for p in problems if best.get(p.key, 0.0) <= 1.0]
