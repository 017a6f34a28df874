"""A kernel of a `KernelLibrary` as a harness implementation whose workspace the caller can provide (and fence)."""
from __future__ import annotations


import torch

from cudal2_catalog.config import Knobs

from ..kernel_library import STATUS_NAMES, Kernel, KernelError


class KernelImpl:
    """`impl(a, b, bias, out, workspace=None)` running one library kernel with fixed runtime knobs.

    Unlike `Kernel.run`, the workspace may come from the caller, so the guard check can surround it with guard
    regions; `workspace_bytes` tells the harness how large it must be.
    """

    def __init__(self, kernel: Kernel, splits: int = 0, swizzle: int = 0, raster: int = 0) -> None:
        self.kernel = kernel
        self.knobs = Knobs(splits, swizzle, raster).to_dict()
        self.__name__ = kernel.name

    def workspace_bytes(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                        out: torch.Tensor) -> int:
        """Workspace the kernel needs for this problem."""
        return self.kernel.workspace_size(self.kernel.problem(a, b, out, bias, **self.knobs))

    def can_implement(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> bool:
        """Whether the kernel accepts this problem (shape, strides, alignment)."""
        return self.kernel.can_implement(self.kernel.problem(a, b, out, bias, **self.knobs))

    def __call__(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                 workspace: torch.Tensor | None = None) -> torch.Tensor:
        need = self.workspace_bytes(a, b, bias, out)
        if workspace is None and need:
            workspace = torch.empty(need, dtype=torch.uint8, device=a.device)
        p = self.kernel.problem(a, b, out, bias, workspace=workspace, **self.knobs)
        status = self.kernel.launch(p)  # Kernel.run would allocate its own workspace
        if status != 0:
            raise KernelError(f"kernel {self.kernel.name} on M={p.m} N={p.n} K={p.k}: "
                              f"{STATUS_NAMES.get(status, status)}")
        return out
