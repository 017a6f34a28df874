"""The paper's reward: mean case speedup minus error and code-length penalties; fixed rewards for failures."""
import pytest

from search import reward
from search.candidate import CRASH, INCORRECT, OK, STATUSES, Candidate, EvalResult
from cudal2_catalog.codegen import default_configs

CONFIG = Candidate(config=default_configs()[0].name)


def test_ok_reward_is_mean_speedup_minus_penalties():
    result = EvalResult(OK, us=1.0, baseline_us=1.2, case_speedups=[1.1, 1.3], max_rel_err=1e-3)
    length = reward.code_length(CONFIG)
    assert 200 < length < 2000
    expected = 1.2 - reward.ALPHA * 1e-3 - reward.BETA * length / 1000
    assert reward.reward(result, CONFIG) == pytest.approx(expected)


def test_longer_sources_and_larger_errors_cost_reward():
    result = EvalResult(OK, us=1.0, baseline_us=1.0, case_speedups=[1.0], max_rel_err=0.0)
    short = Candidate(source="x" * 1000, source_name="k")
    long = Candidate(source="x" * 5000, source_name="k")
    assert reward.reward(result, short) - reward.reward(result, long) == pytest.approx(4 * reward.BETA)
    worse = EvalResult(OK, us=1.0, baseline_us=1.0, case_speedups=[1.0], max_rel_err=0.01)
    assert reward.reward(worse, short) < reward.reward(result, short)


def test_every_failure_status_has_a_negative_reward():
    assert set(reward.FAILURE_REWARD) == set(STATUSES) - {OK}
    assert all(v < 0 for v in reward.FAILURE_REWARD.values())
    assert reward.reward(EvalResult(CRASH, reason="x"), CONFIG) == reward.FAILURE_REWARD[CRASH]
    assert reward.FAILURE_REWARD[INCORRECT] < reward.FAILURE_REWARD["compile_error"]


def test_ok_without_case_speedups_is_an_error():
    with pytest.raises(ValueError, match="case speedups"):
        reward.reward(EvalResult(OK, us=1.0, baseline_us=1.0), CONFIG)


def test_every_failure_scores_below_every_valid_candidate():
    """However long its source, slow or inexact, a valid candidate outscores every failure."""
    worst_valid = EvalResult(OK, us=1e6, baseline_us=1.0, case_speedups=[1e-6], max_rel_err=0.05)
    huge = Candidate(source="x" * 3_000_000, source_name="k")
    assert reward.reward(worst_valid, huge) > reward.VALID_FLOOR > max(reward.FAILURE_REWARD.values())
    assert reward.reward(worst_valid, huge) == pytest.approx(1e-6 - 2 * reward.PENALTY_CAP)
