"""Static scan of search-written kernel sources: constructs a GEMM launcher must not contain, found before compiling.

The kernel C ABI (csrc/include/cudal2/abi.h) lets a launcher only enqueue work on the caller's stream. Anything that
could make a kernel look faster than it is, or break the caller, is refused here with the construct and the line:
private streams or events, host synchronisation, other GEMM libraries, allocation in the launcher, results cached by
pointer, persisting-L2 policies, host threads, and fp16 accumulation where the source spells it.
"""
from __future__ import annotations

import re

# (what is banned, pattern). Patterns run on the source with comments removed.
BANNED: tuple[tuple[str, str], ...] = (
    ("stream or event creation (launch on the caller's stream only)",
     r"\bcuda(StreamCreate|EventCreate)\w*|\bcuStreamCreate\w*|\bcuEventCreate\w*"),
    ("host synchronisation",
     r"\bcuda(Device|Stream|Event|Thread)Synchronize\b|\bcuda(Stream|Event)Query\b|\bcuCtxSynchronize\b"
     r"|\bcudaMemcpy(To|From)?(Symbol)?\s*\(|\bcudaMemset\s*\("),
    ("a call into another GEMM library or torch (cuBLAS, cuBLASLt, cuDNN, ATen)",
     r"\bcublas\w*|\bcudnn\w*|<torch/|\bat::|\btorch::|\bc10::"),
    ("memory allocation in the launcher (use the caller's workspace)",
     r"\bcuda(Malloc|MallocAsync|MallocManaged|MallocHost|HostAlloc|Free|FreeAsync)\s*\(|\bcuMem(Alloc|Free)\w*"
     r"|\b(malloc|calloc|realloc|free)\s*\(|\bnew\s+[\w:<>]+\s*[\[(]"),
    ("a static cache keyed by pointers (results must be computed on every call)",
     r"\bstatic\s+[^;]*\b(map|unordered_map|set|unordered_set)\s*<\s*(const\s+)?[\w:]+\s*\*"
     r"|\bstatic\s+(const\s+)?(void|__half|half|__nv_bfloat16|float)\s*\*"),
    ("a persisting-L2 access policy",
     r"\baccessPolicyWindow\b|\bcudaAccessPolicyWindow\b|\bcudaLimitPersistingL2CacheSize\b"
     r"|\bcudaAccessPropertyPersisting\b|\bcudaStreamAttributeAccessPolicyWindow\b"),
    ("host threads", r"\bstd::(thread|async|jthread)\b|\bpthread_create\b|#\s*include\s*<(thread|future)>"),
    ("fp16 accumulation (accumulate in fp32)",
     r"\b__hfma2?\s*\(|\b__hfma2?_\w+\s*\(|\bmma\.sync\.aligned\.\w+\.row\.col\.f16\."
     r"|\bwgmma\.mma_async\.sync\.aligned\.\w+\.f16\.|\bSM\d+_\w*_F16F16F16"),
)


def strip_comments(source: str) -> str:
    """The source without // and /* */ comments (line count kept, so hits keep their line numbers)."""
    source = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


def scan(source: str) -> list[str]:
    """Every banned construct in `source`, as "line N: <what is banned>: <the text>" (empty: nothing found)."""
    code = strip_comments(source)
    hits = []
    for what, pattern in BANNED:
        for match in re.finditer(pattern, code):
            line = code.count("\n", 0, match.start()) + 1
            hits.append(f"line {line}: {what}: {match.group().strip()!r}")
    return hits
