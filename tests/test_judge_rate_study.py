"""CPU tests of studies.judge_rate: sessions split at pauses, a round's first verdict per problem, the rates of a
session and each session's rate at the pooled size mix."""
import pytest

from studies import judge_rate


def verdict(created: float, eval_s: float, problem: str = "p", round_: int = 0, cases: int = 3,
            bucket: str = "<24") -> dict:
    return {"run": "r", "problem": problem, "round": round_, "created": created, "eval_s": eval_s, "cases": cases,
            "bucket": bucket, "speedup": 1.05 if problem == "q" else 0.9}


def test_sessions_split_at_pauses_and_a_rounds_first_verdict_per_problem():
    rows = [verdict(0, 0.5), verdict(1, 0.1), verdict(2, 0.5, problem="q"), verdict(1000, 0.5), verdict(1001, 0.1)]
    parts = judge_rate.sessions(rows, 600)
    assert [len(p) for p in parts] == [3, 2]
    assert judge_rate.first_of_round(parts[0]) == [True, False, True]
    row = judge_rate.session_row(parts[0])
    assert row["verdicts"] == 3 and row["span_s"] == 2 and row["per_minute"] == pytest.approx(90)
    assert row["per_judge_minute"] == pytest.approx(60 * 3 / 1.1)
    assert row["first_mean_s"] == pytest.approx(0.5) and row["other_mean_s"] == pytest.approx(0.1)
    assert row["one_case"] == 0 and row["problems"] == 2 and row["finds"] == 1   # q's 1.05 is over FIND


def test_rates_at_one_mix_weigh_each_sessions_bucket_means_by_the_pooled_counts():
    slow = [verdict(i, 0.2, bucket="<24") for i in range(3)] + [verdict(10 + i, 0.4, bucket="24-28") for i in range(1)]
    fast = [verdict(100 + i, 0.1, bucket="<24") for i in range(1)] + \
        [verdict(110 + i, 0.2, bucket="24-28") for i in range(3)] + [verdict(120, 9.0, bucket="28-32")]
    common, rates = judge_rate.at_common_mix([slow, fast], min_bucket=1)
    assert common == ["<24", "24-28"]   # 28-32: only one session has it
    # pooled mix 4 x <24, 4 x 24-28: slow 4 x 0.2 + 4 x 0.4 = 2.4 s for 8, fast 4 x 0.1 + 4 x 0.2 = 1.2 s
    assert rates == [pytest.approx(60 * 8 / 2.4), pytest.approx(60 * 8 / 1.2)]
    assert judge_rate.at_common_mix([slow, fast], min_bucket=2)[0] == []
