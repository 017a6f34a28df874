"""Parses an LLM's answer into proposals: points of the search space, or whole kernel sources (the kernel C ABI).

The answer is one JSON object (bare, or in a ```json fence):
    {"points": [{"family": ..., "dtype": ..., "tile_m": ..., ...}, ...],
     "kernels": [{"name": "<identifier>", "source": "<.cu text exporting cudal2_kernel_<name>>"}, ...]}
Each item becomes a Proposal: a candidate, or MALFORMED / SCAN_REJECTED with the reason.
"""
from __future__ import annotations

import json
import re

from search.candidate import MALFORMED, SCAN_REJECTED, Candidate, Proposal
from search.llm.static_scan import scan
from search.candidate_space import parse_point

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,95}")
FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.S)


def answer_document(text: str) -> dict:
    """The JSON object of an answer (the first ```json fence if there is one). Raises ValueError saying why not."""
    fenced = FENCE.search(text)
    body = fenced.group(1) if fenced else text.strip()
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f'expected {{"points": [...], "kernels": [{{"name": ..., "source": ...}}]}}') from None
    except RecursionError:
        raise ValueError("the answer's JSON is nested too deeply") from None
    if not isinstance(doc, dict) or not ({"points", "kernels"} & set(doc)):
        raise ValueError('the answer must be a JSON object with "points" and/or "kernels"')
    return doc


def source_proposal(item, provenance: str) -> Proposal:
    """One "kernels" item as a candidate, or why it cannot be one (MALFORMED: shape of the item or the export
    symbol; SCAN_REJECTED: banned constructs, every hit listed)."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("source"), str):
        return Proposal(None, MALFORMED, 'a kernel is {"name": identifier, "source": .cu text}')
    name, source = item["name"], item["source"]
    if not NAME.fullmatch(name):
        return Proposal(None, MALFORMED, f"kernel name {name!r} is not a C identifier (letters, digits, _)")
    export = re.compile(rf"\bcudal2_kernel_{name}\s*\(\s*(void)?\s*\)|CUDAL2_EXPORT_KERNEL\(\s*{name}\s*,")
    if not export.search(source):
        return Proposal(None, MALFORMED, f'the source does not export extern "C" const cudal2_kernel* '
                                         f"cudal2_kernel_{name}(void) (or CUDAL2_EXPORT_KERNEL({name}, ...))")
    cand = Candidate(source=source, source_name=name, provenance=provenance)
    hits = scan(source)
    if hits:
        return Proposal(cand, SCAN_REJECTED, "; ".join(hits))
    return Proposal(cand)


def point_proposal(item, provenance: str) -> Proposal:
    """One "points" item as a candidate, or MALFORMED with parse_point's reason."""
    try:
        return Proposal(parse_point(item, provenance))
    except (ValueError, TypeError) as exc:
        return Proposal(None, MALFORMED, f"point {json.dumps(item)[:300]}: {exc}")


def parse_answer(text: str, provenance: str) -> list[Proposal]:
    """Every proposal in an answer; a single MALFORMED proposal when the answer itself cannot be read."""
    try:
        doc = answer_document(text)
    except ValueError as exc:
        return [Proposal(None, MALFORMED, str(exc))]
    points, kernels = doc.get("points", []), doc.get("kernels", [])
    if not isinstance(points, list) or not isinstance(kernels, list):
        return [Proposal(None, MALFORMED, '"points" and "kernels" must be JSON lists')]
    return [point_proposal(p, provenance) for p in points] + [source_proposal(k, provenance) for k in kernels]
