"""The kernel catalog: what a cudal2 kernel is, below everything that builds, runs, measures or searches kernels.

`config` (HgemmConfig: a kernel's whole identity and name; Knobs: its runtime knobs), `families` (per family: code
template, feasibility, default set, knob grid), `space` (the families' parameters and knobs as data, with
feasibility-checked sampling and neighbours) and `codegen` (one generated `.cu` per config under `kernels/`).
Pure Python with no dependencies: the build, the runtime's table checks, the benchmarks and the search import it;
it imports none of them.
"""
