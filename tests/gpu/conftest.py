"""Every test under tests/gpu/ carries the `gpu` marker."""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
