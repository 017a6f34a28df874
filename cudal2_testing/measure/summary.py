"""Summaries of measurements shared by the benchmarks, the search and the studies: the geometric mean of speedups and
Markdown tables of results."""
from __future__ import annotations

import math


def geomean(values) -> float:
    """Geometric mean of positive values (NaN when there are none)."""
    values = list(values)
    return math.exp(math.fsum(map(math.log, values)) / len(values)) if values else math.nan


def markdown_table(header: list[str], rows: list[list]) -> list[str]:
    """The lines of a Markdown table (cells rendered with str)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
