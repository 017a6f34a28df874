"""A GPU check shared by the kernel-family tests: kernels enqueued back to back without syncs (programmatic dependent
launch on sm_90 lets a kernel start before the one before it ends) still see what that kernel wrote."""
from __future__ import annotations

import torch

from cudal2_testing.correctness.inputs import generator


def assert_chain_sees_preceding_writes(kernel, m: int, n: int, splits: int, seed: int = 9, calls: int = 8) -> None:
    """`calls` rounds of: a copy kernel overwrites the [n, n] weight, then two GEMMs of `kernel` (NT) with `splits`,
    the second reading the first's output. Sparse 0/1 inputs keep every value an integer below 2048, so every result
    must equal the fp32 product exactly."""
    gen = generator(seed, "cuda")

    def bits(shape, density):
        return (torch.rand(*shape, generator=gen, device="cuda") < density).half()

    a, weights = bits((m, n), 0.5), [bits((n, n), 0.02) for _ in range(2)]
    w = torch.empty_like(weights[0])
    outs = []
    for i in range(calls):
        w.copy_(weights[i % 2])
        outs.append(kernel.run(kernel.run(a, w, splits=splits), w, splits=splits))
    torch.cuda.synchronize()
    for i, out in enumerate(outs):
        wt = weights[i % 2].float().t()
        assert torch.equal(out.float(), (a.float() @ wt) @ wt), f"{kernel.name} splits={splits}: call {i} differs"
