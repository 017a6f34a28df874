"""CPU tests of studies.idle_runner's arithmetic: beside / alone per round, and the rounds' own spread as its noise."""
import pytest

from studies import idle_runner


def sample(problem: str, round_: int, mode: str, us: list[float]) -> dict:
    return {"problem": problem, "round": round_, "mode": mode, "us": us}


def test_beside_over_alone_per_round_and_the_noise_of_each_mode():
    samples = [sample("p", 0, "beside", [11.0, 10.5, 22.0]), sample("p", 0, "alone", [10.0, 10.0, 20.0]),
               sample("p", 1, "alone", [10.2, 10.0, 20.0]), sample("p", 1, "beside", [10.2, 10.0, 20.0])]
    row, = idle_runner.summarize(samples)
    assert row["rounds"] == 2
    assert row["largest"] == pytest.approx(1.1) and row["least"] == pytest.approx(1.0)   # median of each round's cases
    assert row["median"] == pytest.approx(1.05)
    assert row["noise"] == pytest.approx(1 - 10.2 / 11.0)   # beside, round 1 over round 0: the median case 10.2 / 11


def test_a_round_missing_a_mode_is_left_out_and_the_report_has_a_row_per_problem():
    samples = [sample("p", 0, "beside", [1.0]), sample("p", 0, "alone", [1.0]), sample("p", 1, "beside", [2.0]),
               sample("q", 0, "alone", [1.0])]
    rows = idle_runner.summarize(samples)
    assert [r["problem"] for r in rows] == ["p"] and rows[0]["rounds"] == 1
    lines = idle_runner.report_lines(rows, {"gpu_name": "GPU", "commit": "abc"})
    assert sum(line.startswith("| p |") for line in lines) == 1 and not any("| q |" in line for line in lines)
