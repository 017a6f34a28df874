"""The LLM proposer's prompt: first what every problem shares (the kernel C ABI and the family sources, the space,
the rules every source is scanned against, the answer format), then the problem, contrastive measured examples and
the contextual memory."""
from __future__ import annotations

import json
from pathlib import Path

from search.candidate import Problem
from search.llm.static_scan import BANNED
from search.proposers import Measured, ProposalContext
from cudal2_catalog.space import families_for, schema
from search.candidate_space import point_of

INCLUDE_DIR = Path(__file__).resolve().parent.parent.parent / "csrc" / "include" / "cudal2"
ABI_HEADERS = ("abi.h", "kernel_export.h")
HEADER_CHARS = 16000   # per family header shown (the start: the template and its parameters)

SYSTEM = """You write and tune fp16/bf16 GEMM kernels for NVIDIA GPUs (CUTLASS/CuTe, PTX). You propose either
points of a search space of templated kernels, or whole kernel sources implementing a small C ABI. Every proposal is
compiled, checked for correctness (random, exact-integer and NaN-poisoned outputs with guard bands, re-checked after
timing) and timed in kernel mode against cuBLASLt's autotuned best on the same inputs. Answer with one JSON object
only."""

ANSWER_FORMAT = """Answer with one JSON object (no prose outside it):
{"points": [<point>, ...], "kernels": [{"name": "<C identifier>", "source": "<complete .cu file>"}, ...]}
A point has the fields of the schema above (family, dtype, layout, tile_m, tile_n, tile_k required; the rest take
defaults). A kernel source must #include "cudal2/kernel_export.h" and export
extern "C" const cudal2_kernel* cudal2_kernel_<name>(void) (the CUDAL2_EXPORT_KERNEL macro does this), accumulate in
fp32, and launch only on p->stream."""


def family_sources(arch: int) -> str:
    """The header text of every family that runs on `arch` (its template and parameters), each cut at HEADER_CHARS."""
    parts = []
    for family in families_for(arch):
        for path in sorted(INCLUDE_DIR.glob(f"{family}*.cuh")):
            text = path.read_text()
            cut = "" if len(text) <= HEADER_CHARS else f"\n// ... ({len(text) - HEADER_CHARS} more characters)"
            parts.append(f"### csrc/include/cudal2/{path.name}\n```cpp\n{text[:HEADER_CHARS]}{cut}\n```")
    return "\n\n".join(parts)


def abi_source() -> str:
    """The kernel C ABI headers, verbatim."""
    return "\n\n".join(f"### csrc/include/cudal2/{name}\n```cpp\n{(INCLUDE_DIR / name).read_text()}\n```"
                       for name in ABI_HEADERS)


def describe(measured: Measured) -> str:
    """One measured example: the point (or the source kernel's name), the problem, the time and the speedup."""
    cand = measured.candidate
    what = json.dumps(point_of(cand)) if cand.config else f"source kernel {cand.source_name}"
    return f"- {measured.problem_key}: {what}: {measured.us:.2f} us, {measured.speedup:.3f}x cuBLASLt"


def examples(context: ProposalContext) -> str:
    """The contrastive examples: the fastest and slowest measured on this problem, the fastest on its neighbours."""
    sections = (("Fastest on this problem", context.best), ("Slowest on this problem", context.worst),
                ("Fastest on neighbouring problems", context.neighbour_best))
    text = [f"{title}:\n" + "\n".join(map(describe, rows)) for title, rows in sections if rows]
    return "\n\n".join(text) or "Nothing measured yet."


PROBLEM_HEADING = "# Problem\n"   # where a prompt's problem-specific part begins (all before it is shared)


def shared(arch: int) -> str:
    """The part of the user message that is the same for every problem on compute capability `arch`: the kernel C
    ABI, the family sources, the search space, the rules for sources and the answer format (first, so that an
    endpoint's prefix cache and the RL export's prompt store hold it once)."""
    rules = "\n".join(f"- no {what}" for what, _ in BANNED)
    return f"""# The kernel C ABI
{abi_source()}

# Kernel families (templates the points instantiate)
{family_sources(arch)}

# Search space
```json
{json.dumps(schema(), indent=1)}
```

# Rules for kernel sources (scanned before compiling; a hit rejects the kernel)
{rules}

# Answer format
{ANSWER_FORMAT}"""


def specific(problem: Problem, context: ProposalContext, n: int) -> str:
    """The problem-specific part of the user message: the problem, what was measured, the memory, the task."""
    capability = f"{context.arch // 10}.{context.arch % 10}"
    return PROBLEM_HEADING + f"""D[M, N] = A[M, K] @ op(B), {problem.dtype}, layout {problem.layout} (nn: B is [K, N];
nt: B is [N, K]), M={problem.m} N={problem.n} K={problem.k}, on a GPU of compute capability {capability}.

# Measured so far
{examples(context)}

# What we learned (contextual memory)
{context.memory or "(empty)"}

# Task
Propose {n} new candidates likely to beat the fastest above on this problem, in the answer format above."""


def build(problem: Problem, context: ProposalContext, n: int) -> tuple[str, str]:
    """(system, user) messages asking for `n` proposals for `problem` on compute capability `context.arch`: the
    shared part, then the problem's."""
    return SYSTEM, f"{shared(context.arch)}\n\n{specific(problem, context, n)}"
