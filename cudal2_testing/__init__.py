"""Correctness and measurement helpers for cudal2 kernels, used by the tests, the benchmarks and the search.

`correctness` (the checks of docs/EVALUATION.md against an fp32 reference), `measure` (timing modes, the results
environment header, shape sets, the cold-L2 rule, geomean and Markdown tables), `kernel_timing` (one problem: a
loaded kernel by name with its knobs checked and timed beside cuBLASLt-autotune; the sweep, the search's evaluator
and the benchmarks), `kernel_library` (one torch-free kernel library loaded through ctypes, for the kernel tests).
Sits below benchmarks/ and search/, which do not import each other, and above cudal2_ops (whose user API it
checks); cudal2_ops never imports it.
"""
