"""Shared pytest setup: tests under tests/gpu/ carry the `gpu` marker and are skipped where no CUDA GPU is visible."""
from __future__ import annotations

import pytest
import torch

from build_tools import kernel_lib


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (run on the lent H100/H200)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no CUDA GPU visible")
    for item in items:
        if "/tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)


@pytest.fixture
def kernel_toolchain() -> None:
    """Skips the test where kernels cannot be compiled (no nvcc or no CUTLASS headers)."""
    problem = kernel_lib.toolchain_problem()
    if problem is not None:
        pytest.skip(problem)
