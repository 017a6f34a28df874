"""CPU tests of the correctness harness: tolerance arithmetic, guards, inputs, summary, fuzz cases and reports,
the sanitizer script's pure parts, and proof on CPU tensors that broken implementations fail their check."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from cudal2_testing.correctness import (GUARD_BYTES, CheckResult, ErrorStats, GuardedTensor, all_passed, error_stats,
                                    exact_expected, exact_inputs, max_abs_bound, reference, run_checks, summarize,
                                    torch_impl, within_tolerance)
from cudal2_testing.correctness import fuzz
from cudal2_testing.correctness.inputs import exact_density, same_bits
from cudal2_testing.correctness.negative_controls import (Nondeterministic, fp16_accumulating, ignores_leading_dimension,
                                                       last_row_unwritten, low_precision, writes_past_the_end)

REPO = Path(__file__).resolve().parent.parent
CPU_CHECKS = ("random", "exact", "guards", "layouts", "determinism")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- tolerance arithmetic and the reference

def test_max_abs_bound_is_twice_baseline_plus_slack():
    assert max_abs_bound(ErrorStats(0.0, 0.25)) == pytest.approx(0.501)
    assert max_abs_bound(ErrorStats(0.0, 0.0)) == pytest.approx(1e-3)


@pytest.mark.parametrize("dtype,rel_tol", [(torch.float16, 1e-3), (torch.bfloat16, 8e-3)])
def test_within_tolerance_boundaries(dtype, rel_tol):
    base = ErrorStats(0.0, 0.1)
    assert within_tolerance(ErrorStats(rel_tol, 0.201), base, dtype)[0]
    assert not within_tolerance(ErrorStats(rel_tol * 1.01, 0.0), base, dtype)[0]
    assert not within_tolerance(ErrorStats(0.0, 0.2011), base, dtype)[0]


def test_error_stats_values_and_nan():
    ref = torch.tensor([[3.0, 4.0]])
    stats = error_stats(torch.tensor([[3.0, 4.5]], dtype=torch.float16), ref)
    assert stats.rel_err == pytest.approx(0.1) and stats.max_abs_err == pytest.approx(0.5)
    assert error_stats(torch.tensor([[float("nan"), 4.0]]), ref) == ErrorStats(float("inf"), float("inf"))
    assert error_stats(torch.zeros(1, 2), torch.zeros(1, 2)) == ErrorStats(0.0, 0.0)


def test_reference_layouts_and_bias_agree():
    g = torch.Generator().manual_seed(0)
    a, b, bias = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g), torch.randn(3, generator=g)
    ref_nn = reference(a.half(), b.half(), "nn", bias.half())
    ref_nt = reference(a.half(), b.half().t().contiguous(), "nt", bias.half())
    assert ref_nn.dtype == torch.float32 and torch.allclose(ref_nn, ref_nt, rtol=1e-6, atol=1e-6)
    expected = a.half().double() @ b.half().double() + bias.half().double()
    assert torch.allclose(ref_nn.double(), expected, atol=1e-5)
    with pytest.raises(ValueError):
        reference(a, b, "tn")


# ---------------------------------------------------------------- exact-integer inputs

def test_exact_density_targets_sums_past_2048():
    for k in (4096, 8192, 20000):
        assert k * exact_density(k) ** 2 > 2048 * 1.2
    assert exact_density(100) == 0.5


def test_exact_expected_rounds_once_to_dtype():
    a = torch.ones(1, 2049, dtype=torch.float16)
    b = torch.ones(2049, 1, dtype=torch.float16)
    assert float(exact_expected(a, b, "nn", None)) == 2048.0  # 2049 is a tie in fp16: rounds to even
    assert float(exact_expected(a, b, "nn", torch.ones(1, dtype=torch.float16))) == 2050.0


def test_exact_inputs_are_zero_one_and_reproducible():
    a, b, bias = exact_inputs((4, 6, 4096), "nt", torch.bfloat16, True, 3, "cpu")
    assert set(a.unique().tolist()) <= {0.0, 1.0} and b.shape == (6, 4096)
    assert bias.shape == (6,) and not bias.any()
    assert same_bits(a, exact_inputs((4, 6, 4096), "nt", torch.bfloat16, True, 3, "cpu")[0])


# ---------------------------------------------------------------- guarded views

def test_guarded_tensor_layout_and_alignment():
    g = GuardedTensor((3, 5), torch.float16, "cpu", ld=9, offset=1)
    assert g.view.shape == (3, 5) and g.view.stride() == (9, 1)
    assert g.view.data_ptr() % 16 != 0
    assert g.view.data_ptr() - g.buffer.data_ptr() >= GUARD_BYTES
    assert g.buffer.numel() - (g.view.data_ptr() - g.buffer.data_ptr()) - (2 * 9 + 5) * 2 >= GUARD_BYTES


@pytest.mark.parametrize("where,expected", [(-1, "before the view"), (2 * 9 + 5, "after the view"),
                                            (5, "in the padding between rows")])
def test_guarded_tensor_detects_stray_writes(where, expected):
    g = GuardedTensor((3, 5), torch.float16, "cpu", ld=9, offset=1).fill(float("nan"))
    g.view.fill_(1.0)
    assert g.changed_outside() is None
    assert g.changed_anywhere() == "the input itself was modified"
    g.buffer.view(torch.int16)[g.first + where] ^= 1
    found = g.changed_outside()
    assert found is not None and expected in found


def test_guarded_tensor_requires_fill():
    with pytest.raises(RuntimeError):
        GuardedTensor((2, 2), torch.float16, "cpu").changed_outside()


# ---------------------------------------------------------------- run_checks on CPU: torch passes, broken impls fail

SHAPE = (6, 10, 4096)


def writes_its_input(a, b, bias, out):
    a[0, 0] = a[0, 0] + 1
    return torch.matmul(a, b, out=out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout,with_bias", [("nn", False), ("nn", True), ("nt", True)])
def test_torch_passes_every_cpu_check(layout, dtype, with_bias):
    results = run_checks(torch_impl(layout), [SHAPE, (3, 7, 65)], layout, dtype, with_bias=with_bias, seeds=(0, 1),
                         device="cpu")
    assert [r.check for r in results[:5]] == list(CPU_CHECKS)
    assert all_passed(results), summarize(results)


@pytest.mark.parametrize("impl,check,fragment", [
    (fp16_accumulating, "exact", "outputs differ"),
    (last_row_unwritten, "guards", "NaN left in 1 of 6 rows (first row 5"),
    (writes_past_the_end, "guards", "out: "),
    (writes_its_input, "guards", "a: the input itself was modified"),
    (ignores_leading_dimension, "layouts", "ld+8"),
    (Nondeterministic(), "determinism", "1 outputs differ"),
    (low_precision, "random", "rel_err="),
])
def test_broken_impl_fails_its_check(impl, check, fragment):
    (result,) = run_checks(impl, [SHAPE], "nn", torch.float16, checks=[check], seeds=(0,), device="cpu")
    assert not result.passed and fragment in result.detail, result.detail
    (control,) = run_checks(torch_impl("nn"), [SHAPE], "nn", torch.float16, checks=[check], seeds=(0,), device="cpu")
    assert control.passed, control.detail


def test_exceptions_fail_the_check_and_bad_arguments_raise():
    def raises(a, b, bias, out):
        raise RuntimeError("no kernel\nsecond line")

    (result,) = run_checks(raises, [SHAPE], "nn", torch.float16, checks=["random"], device="cpu")
    assert not result.passed and result.detail == "raised RuntimeError: no kernel"
    with pytest.raises(ValueError, match="unknown checks"):
        run_checks(raises, [SHAPE], "nn", torch.float16, checks=["bogus"], device="cpu")
    with pytest.raises(ValueError, match="need a CUDA device"):
        run_checks(raises, [SHAPE], "nn", torch.float16, checks=["stream"], device="cpu")
    assert not all_passed([])


def test_summary_counts_and_failure_lines():
    results = [CheckResult("random", (1, 2, 3), "nn", "fp16", True, "ok"),
               CheckResult("exact", (1, 2, 3), "nn", "fp16", False, "7 of 9 outputs differ")]
    results += [CheckResult("guards", (4, 5, 6), "nt", "bf16", False, "NaN") for _ in range(3)]
    text = summarize(results, max_failures=2)
    lines = text.splitlines()
    assert lines[0] == "correctness: 1/5 passed, 4 FAILED"
    assert lines[1].split() == ["random", "1", "passed", "0", "failed"]
    assert "FAIL exact nn fp16 M=1 N=2 K=3: 7 of 9 outputs differ" in lines
    assert lines[-1] == "... and 2 more failures"
    assert json.loads(json.dumps(results[1].to_dict()))["shape"] == [1, 2, 3]


# ---------------------------------------------------------------- fuzz cases and reports

def test_fuzz_cases_reproducible_and_independent_of_count():
    cases = fuzz.make_cases(7, 300)
    assert cases == fuzz.make_cases(7, 300)
    assert fuzz.make_cases(7, 50) == cases[:50]
    assert fuzz.make_case(7, 123) == cases[123]
    assert fuzz.make_cases(8, 50) != cases[:50]


def test_fuzz_cases_cover_the_space_within_caps():
    cases = fuzz.make_cases(0, 3000)
    assert all(1 <= d <= fuzz.MAX_DIM for c in cases for d in (c.m, c.n, c.k))
    assert all(c.flops() <= fuzz.BIG_FLOP_CAP for c in cases)
    big = [c for c in cases if c.flops() > fuzz.FLOP_CAP]
    assert 0 < len(big) < 0.05 * len(cases)
    assert {c.layout for c in cases} == {"nn", "nt"} and {c.dtype for c in cases} == {"fp16", "bf16"}
    assert {c.a_mode for c in cases} == set(fuzz.OPERAND_MODES) == {c.b_mode for c in cases}
    assert {c.out_mode for c in cases if c.layout == "nn"} == set(fuzz.OUT_MODES)
    assert all(c.out_mode == "none" and not (c.bias and c.layout == "nn") for c in cases if c.layout == "nt")
    assert {c.bias for c in cases if c.layout == "nt"} == {True, False}
    assert all(c.m % c.batch == 0 for c in cases) and {c.batch for c in cases} == {1, 2, 3}
    assert min(min(c.m, c.n, c.k) for c in cases) == 1 and max(max(c.m, c.n, c.k) for c in cases) > 10000


def test_fuzz_operand_modes():
    case = dataclasses.replace(fuzz.make_case(0, 0), pad=5, offset=3)
    g = torch.Generator().manual_seed(0)
    padded = fuzz.operand(4, 6, "padded", case, torch.float16, g, "cpu")
    assert padded.shape == (4, 6) and padded.stride() == (11, 1)
    offset = fuzz.operand(4, 6, "offset", case, torch.float16, g, "cpu")
    assert offset.is_contiguous() and offset.data_ptr() % 16 != 0
    transposed = fuzz.operand(4, 6, "transposed", case, torch.float16, g, "cpu")
    assert transposed.shape == (4, 6) and not transposed.is_contiguous()
    with pytest.raises(ValueError):
        fuzz.operand(4, 6, "bogus", case, torch.float16, g, "cpu")


def small_cases(count: int) -> list[fuzz.FuzzCase]:
    """The first `count` cheap cases of seed 3."""
    return [c for c in fuzz.make_cases(3, 400) if c.flops() < 1e6][:count]


def test_run_fuzz_fp32_passes_and_report_validates():
    cases = small_cases(40)
    assert {c.a_mode for c in cases} == set(fuzz.OPERAND_MODES) and {c.batch for c in cases} > {1}
    doc = fuzz.run_fuzz(3, cases, *fuzz.fp32_api(), "cpu", "fp32", {"device": "cpu"})
    fuzz.validate_report(json.loads(json.dumps(doc)))
    assert doc["cases"] == 40 and doc["failures"] == 0, doc["failed_cases"][:2]


def test_run_fuzz_reports_every_failure_with_repro():
    import torch.nn.functional as F

    def off_by_one_linear(x, w, bias=None):
        return F.linear(x, w, bias) + 1

    def wrong_shape_matmul(a, b, out=None):
        return torch.zeros(1, dtype=a.dtype)

    cases = small_cases(12)
    doc = fuzz.run_fuzz(3, cases, wrong_shape_matmul, off_by_one_linear, "cpu", "broken", {})
    fuzz.validate_report(doc)
    assert doc["failures"] == len(cases)
    failure = doc["failed_cases"][0]
    assert failure["repro"] == f"python3 scripts/fuzz_api.py --seed 3 --only {failure['index']} --impl broken"
    for failure in doc["failed_cases"]:
        assert failure["error"].startswith("returned (1,)" if failure["layout"] == "nn" else "rel_err="), failure


def test_validate_report_rejects_inconsistent_documents():
    doc = fuzz.run_fuzz(0, small_cases(3), torch.matmul, torch.nn.functional.linear, "cpu", "torch", {},
                        time_limit_s=0.0)
    fuzz.validate_report(doc)
    assert (doc["cases"], doc["cases_requested"], doc["failures"]) == (0, 3, 0)
    with pytest.raises(ValueError, match="disagrees"):
        fuzz.validate_report({**doc, "failures": 1})
    with pytest.raises(ValueError, match="schema"):
        fuzz.validate_report({**doc, "schema": "other/1"})
    with pytest.raises(ValueError, match="lacks"):
        fuzz.validate_report({**doc, "failures": 1, "failed_cases": [{"index": 0}]})


def test_fuzz_script_end_to_end_on_cpu(tmp_path):
    script = load_script("fuzz_api")
    index = next(c.index for c in fuzz.make_cases(5, 200) if c.flops() < 1e5)
    out = tmp_path / "fuzz.json"
    assert script.main(["--impl", "fp32", "--device", "cpu", "--seed", "5", "--only", str(index),
                        "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    fuzz.validate_report(doc)
    assert doc["cases"] == 1 and doc["environment"]["torch"] == torch.__version__


# ---------------------------------------------------------------- sanitizer script: pure parts

def test_sanitize_sampling_and_shapes():
    script = load_script("sanitize_kernels")
    names = [f"k{i}" for i in range(20)]
    picked = script.sample_kernels(names, 5, seed=1)
    assert picked == script.sample_kernels(list(reversed(names)), 5, seed=1) and len(set(picked)) == 5
    assert script.sample_kernels(names, None, 0) == sorted(names)
    assert script.parse_shapes("128x64x32,1X2X3") == ((128, 64, 32), (1, 2, 3))
    with pytest.raises(ValueError):
        script.parse_shapes("0x1x1")
    assert all(min(s) >= 1 for s in script.DEFAULT_SHAPES)
    assert any(s[0] % 64 and s[1] % 64 for s in script.DEFAULT_SHAPES)  # residues in M and N


def test_sanitize_command_and_classification():
    script = load_script("sanitize_kernels")
    cmd = script.sanitizer_command("cs", "racecheck", "lib.so", "k", "1x2x3")
    assert cmd[:3] == ["cs", "--tool", "racecheck"] and "--racecheck-report" in cmd and cmd[-6:] == [
        "--target", "--lib", "lib.so", "--kernel", "k", "--shapes", "1x2x3"][-6:]
    marker = script.RESULT_MARKER + json.dumps({"1x2x3": "ok rel_err=0"})
    clean = f"{marker}\n========= ERROR SUMMARY: 0 errors\n"
    assert script.classify(0, clean)["status"] == "clean"
    assert script.classify(script.SANITIZER_ERROR_EXIT, "========= ERROR SUMMARY: 3 errors")["status"] == "errors"
    race = f"{marker}\n========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n"
    assert script.classify(0, race)["errors"] == 2 and script.classify(0, race)["status"] == "errors"
    assert script.classify(script.TARGET_WRONG_EXIT, clean)["status"] == "wrong"
    assert script.classify(script.TARGET_UNTESTED_EXIT, clean)["status"] == "untested"
    assert script.classify(1, "Device not supported")["status"] == "unsupported_device"
    assert script.classify(1, "Segmentation fault")["status"] == "failed"
    assert script.classify(None, clean)["status"] == "failed"
    assert "log_tail" in script.classify(1, "boom") and "log_tail" not in script.classify(0, clean)


def test_a_kept_memo_makes_each_checks_inputs_and_references_once(monkeypatch):
    """The search's judge checks a batch's candidates on the same inputs: with a memo the references (fp32, the
    baseline's output, the exact sums) are made once per problem; without one, every call makes its own."""
    from cudal2_testing.correctness import checks

    made = []
    real = checks.reference
    monkeypatch.setattr(checks, "reference", lambda *a, **k: made.append(1) or real(*a, **k))

    def impl(a, b, bias, out):
        return out.copy_((a.float() @ b.float().t()).to(out.dtype))

    shape, dtype = (16, 8, 32), torch.float16
    memo_ctx = checks.CheckContext(device=torch.device("cpu"), memo={})
    for _ in range(3):
        assert checks.check_random(impl, shape, "nt", dtype, memo_ctx).passed
        assert checks.check_exact(impl, shape, "nt", dtype, memo_ctx).passed
    assert len(made) == len(memo_ctx.seeds) and len(memo_ctx.memo) == len(memo_ctx.seeds) + 1
    made.clear()
    plain = checks.CheckContext(device=torch.device("cpu"))
    for _ in range(2):
        checks.check_random(impl, shape, "nt", dtype, plain)
    assert len(made) == 2 * len(plain.seeds)
