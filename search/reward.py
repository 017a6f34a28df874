"""The search's reward (the paper's): mean test-case speedup minus penalties on error and code length.

    reward = mean(case_speedups) - min(ALPHA * max_rel_err, PENALTY_CAP) - min(BETA * code_kchars, PENALTY_CAP)
                                                                                    (status OK)
    reward = FAILURE_REWARD[status]                                                 (any other status)

case_speedups: cuBLASLt-autotune time / candidate time on each of the problem's test cases, timed in the same
evaluation. max_rel_err: the worst relative error against the fp32 reference (fp16 kernels are near 1e-3, so
ALPHA = 10 costs about 0.01: it separates equally fast kernels by accuracy without outweighing speed). code_kchars:
thousands of characters of the candidate's source (a config point counts its rendered `.cu` file; BETA = 0.01 per
1000 characters keeps a 3000-character LLM kernel within 3% of a config point). Each penalty is capped at
PENALTY_CAP, so a valid candidate, however long or slow, scores above VALID_FLOOR = -2 * PENALTY_CAP, and every
failure scores below it: failures get fixed rewards, worse for a failure that costs GPU time or would be dangerous
in a table (wrong results, crashes, hangs, cheats) than for one caught before compiling.
"""
from __future__ import annotations

import functools

from search.candidate import (COMPILE_ERROR, CRASH, HANG, INCORRECT, INFEASIBLE, MALFORMED, OK, SCAN_REJECTED,
                              SUSPICIOUS, UNSUPPORTED, Candidate, EvalResult)
from cudal2_catalog.codegen import render
from cudal2_catalog.config import HgemmConfig

ALPHA = 10.0
BETA = 0.01
PENALTY_CAP = 0.1
VALID_FLOOR = -2 * PENALTY_CAP
FAILURE_REWARD = {MALFORMED: -1.0, INFEASIBLE: -0.5, SCAN_REJECTED: -1.0, COMPILE_ERROR: -0.5, UNSUPPORTED: -0.25,
                  INCORRECT: -1.0, SUSPICIOUS: -1.0, CRASH: -1.0, HANG: -1.0}


@functools.lru_cache(maxsize=4096)
def _rendered_length(config: str) -> int:
    return len(render(HgemmConfig.from_name(config)))


def code_length(candidate: Candidate) -> int:
    """Characters of the candidate's source: the LLM's source, or the config's rendered `.cu` file."""
    return len(candidate.source) if candidate.source else _rendered_length(candidate.config)


def reward(result: EvalResult, candidate: Candidate) -> float:
    """The reward of one evaluation (see the module docstring)."""
    if result.status != OK:
        return FAILURE_REWARD[result.status]
    if not result.case_speedups:
        raise ValueError("an OK evaluation must carry its per-test-case speedups")
    mean_speedup = sum(result.case_speedups) / len(result.case_speedups)
    error_penalty = min(ALPHA * (result.max_rel_err or 0.0), PENALTY_CAP)
    length_penalty = min(BETA * code_length(candidate) / 1000.0, PENALTY_CAP)
    return mean_speedup - error_penalty - length_penalty
