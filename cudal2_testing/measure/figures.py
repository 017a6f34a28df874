"""Figures as the results folders keep them: PNGs quantized to a 256-colour palette (a third of matplotlib's RGBA
size, the same picture for line and scatter plots), so that the committed results stay small enough to travel with
the repository to a GPU machine."""
from __future__ import annotations

import io
from pathlib import Path


def save_png(fig, path: Path, dpi: int = 110, **savefig_kwargs) -> None:
    """Writes matplotlib figure `fig` to `path` as a palette PNG."""
    from PIL import Image  # noqa: PLC0415 (matplotlib's own dependency; only for figures)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, **savefig_kwargs)
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(path, format="PNG", optimize=True)
