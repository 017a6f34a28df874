"""`is_compiled()` (the extension is loaded) against `is_available()` (the tuned path can run: extension and a usable
CUDA device), and what `python -m cudal2_ops info` reports of each."""
import pytest
import torch

import cudal2_ops
from cudal2_ops import cli, ops


@pytest.mark.parametrize("extension", [None, object()])
@pytest.mark.parametrize("gpu", [False, True])
def test_available_needs_the_extension_and_a_gpu(monkeypatch, extension, gpu):
    monkeypatch.setattr(ops, "_C", extension)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert cudal2_ops.is_compiled() is (extension is not None)
    assert cudal2_ops.is_available() is (extension is not None and gpu)


def test_info_reports_the_extension_as_compiled_not_as_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    facts = cli.info()
    assert facts["extension"].startswith("loaded" if cudal2_ops.is_compiled() else "missing")
    assert facts["gpu"] == "none visible: every call runs torch"
