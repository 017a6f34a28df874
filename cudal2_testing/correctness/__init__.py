"""The correctness harness: every check of docs/EVALUATION.md, used by the tests, the benchmarks and the search.

    from cudal2_testing.correctness import run_checks, summarize, torch_impl
    results = run_checks(my_impl, [(128, 256, 4096), (7, 65, 1023)], "nt", torch.float16, with_bias=True)
    print(summarize(results))

An implementation is `impl(a, b, bias, out) -> Tensor` (see `reference`).
"""
from .checks import CHECKS, CUDA_ONLY, CheckContext, CheckResult
from .inputs import GUARD_BYTES, GuardedTensor, exact_expected, exact_inputs, random_inputs
from .reference import (DTYPES, LAYOUTS, REL_TOL, ErrorStats, Impl, api_impl, error_stats, max_abs_bound, reference,
                        strict_cublas, torch_impl, within_tolerance)
from .runner import all_passed, default_checks, run_checks, summarize

__all__ = ["CHECKS", "CUDA_ONLY", "CheckContext", "CheckResult", "DTYPES", "ErrorStats", "GUARD_BYTES",
           "GuardedTensor", "Impl", "LAYOUTS", "REL_TOL", "all_passed", "api_impl", "default_checks", "error_stats",
           "exact_expected", "exact_inputs", "max_abs_bound", "random_inputs", "reference", "run_checks",
           "strict_cublas", "summarize", "torch_impl", "within_tolerance"]
