"""Static scan of search-written kernel sources: constructs a GEMM launcher must not contain, found before compiling.

The kernel C ABI (csrc/include/cudal2/abi.h) lets a launcher only enqueue work on the caller's stream. Anything that
could make a kernel look faster than it is, or break the caller, is refused here with the construct and the line.
The scan reads tokens, not raw text (`search.cxx_tokens`: splices joined, comments dropped only outside literals,
adjacent string literals concatenated), so a `//` inside a string hides nothing and a PTX string split in two is
read whole. `scan` reads a source as written (its directives, and the bodies of its macros as code);
`scan_preprocessed` reads what the compiler reads: the source's own lines in the preprocessor's output, after every
macro (token pasting included) is expanded. The compile farm runs both, then checks the object's symbols
(`search.object_check`); the evaluator's runtime checks catch what no static check can see.
"""
from __future__ import annotations

import re
from search.cxx_tokens import DIRECTIVE, ID, NUMBER, PUNCT, STRING, Token, preprocessed_lines, tokenize

STREAMS = "a stream or event of its own, or the legacy / per-thread default stream (launch on the caller's stream only)"
CAPTURE = "graph capture queries or graph calls (a launcher must behave the same captured or not)"
SYNC = "host synchronisation"
LIBRARIES = "a call into another GEMM library or torch (cuBLAS, cuBLASLt, cuDNN, ATen)"
ALLOCATION = "memory allocation in the launcher (use the caller's workspace)"
STATE = "state kept between calls (static, thread_local or __device__ variables: compute on every call)"
PERSISTING_L2 = "a persisting-L2 access policy"
THREADS = "host threads"
LOADING = "dynamic loading, system calls, driver entry points or the Python runtime"
INITIALIZERS = "code that runs when the library loads or unloads (constructors, destructors)"
FP16_ACCUMULATION = "fp16/bf16 accumulation (accumulate in fp32)"
NAMESPACES = "declarations inside the namespaces of the project, CUTLASS, CUDA or the C++ library"
RESERVED = "reserved names of the CUDA toolchain or the C++ ABI (__cuda*, __device_stub*, __sti*, _Z...)"
LINE_DIRECTIVES = "a #line directive or line marker (it misstates where code comes from)"
RESERVED_MACROS = "a #define or #undef of a reserved name (__x or _X)"
INCLUDES = "an #include outside the project, CUDA, CUTLASS and the C++ library (absolute, .., or a banned header)"

_ID_RULES: tuple[tuple[str, re.Pattern], ...] = tuple((what, re.compile(pattern)) for what, pattern in (
    (STREAMS, r"cuda(Stream|Event)Create\w*|cu(Stream|Event)Create\w*|cudaStream(PerThread|Legacy)"),
    (CAPTURE, r"cudaStream(BeginCapture|EndCapture|IsCapturing|GetCaptureInfo)\w*|cudaGraph\w*|cuGraph\w*"
              r"|cuStream(BeginCapture|EndCapture|IsCapturing|GetCaptureInfo)\w*|cudaThreadExchangeStreamCaptureMode"),
    (SYNC, r"cuda(Device|Stream|Event|Thread)Synchronize|cuda(Stream|Event)Query|cudaDeviceReset|cuCtxSynchronize"
           r"|cu(Stream|Event)(Synchronize|Query)|cudaMemcpy(2D|3D|Peer|ToSymbol|FromSymbol)?|cudaMemset(2D|3D)?"),
    (LIBRARIES, r"(cublas|cudnn|cutensor)\w*"),
    (ALLOCATION, r"cuda(Malloc|Free|HostAlloc|MallocHost|MallocManaged|MallocAsync|FreeAsync|FreeHost)\w*"
                 r"|cuMem(Alloc|Free|Create|HostAlloc)\w*|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|new"),
    (PERSISTING_L2, r"accessPolicyWindow|cudaAccessPolicyWindow|cudaLimitPersistingL2CacheSize|cudaDeviceSetLimit"
                    r"|cudaAccessPropertyPersisting|cuda(Stream|Launch)AttributeAccessPolicyWindow|cudaStreamSetAttribute"
                    r"|cuStreamSetAttribute|cudaCtxResetPersistingL2Cache"),
    (THREADS, r"pthread_\w+|thrd_create"),
    (LOADING, r"dl(open|sym|vsym|mopen|addr|info|error)|dl_iterate_phdr|syscall|system|popen|v?fork|exec[lv]\w*"
              r"|mprotect|mmap|munmap|ptrace|Py[A-Z_]\w*|_Py\w*|cudaGetDriverEntryPoint\w*|cuGetProcAddress\w*"
              r"|__libc_\w+"),
    (INITIALIZERS, r"(__)?(constructor|destructor)(__)?|init_priority"),
    (FP16_ACCUMULATION, r"__h(fma|add|sub|mul)2?(_sat|_relu|_rn)?|__hcmadd|SM\d+_\d+x\d+x\d+_F16F16\w*"),
    (RESERVED, r"__cuda\w*|__device_stub\w*|__sti_\w*|__nv_fatbin\w*|__fatDeviceText|_Z[A-Z0-9]\w*"),
))
# PTX in string literals (adjacent literals already joined): an f16 accumulator (D type) or f16/bf16 arithmetic.
_PTX_FP16 = re.compile(r"\b(wgmma\.mma_async|mma)(\.\w+)*?\.m\d+n\d+k\d+(\.row\.col)?\.(f16|bf16)\b"
                       r"|\b(fma|add|sub|mul)(\.\w+)*\.(f16|f16x2|bf16|bf16x2)\b")
_STRING_RULES: tuple[tuple[str, re.Pattern], ...] = (
    (FP16_ACCUMULATION, _PTX_FP16),
    (INITIALIZERS, re.compile(r"\.(init_array|preinit_array|fini_array|ctors|dtors)\b")),
    (LOADING, re.compile(r"\bcu[A-Z]\w*(Create|Synchronize|Alloc|Query|Launch)\w*|\bPy[A-Z]\w+")),
    (RESERVED, re.compile(r"\b_Z[A-Z0-9]\w+")),   # an asm label borrowing a mangled name
)
_SEQUENCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (LIBRARIES, ("at", "::")), (LIBRARIES, ("torch", "::")), (LIBRARIES, ("c10", "::")),
    (THREADS, ("std", "::", "thread")), (THREADS, ("std", "::", "jthread")), (THREADS, ("std", "::", "async")),
)
HALF_TYPES = frozenset({"__half", "half", "__half2", "half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
                        "nv_bfloat162", "half_t", "bfloat16_t"})
RESERVED_NAMESPACES = frozenset({"cudal2", "cutlass", "cute", "cuda", "std", "cub", "thrust", "nvcuda"})
_BANNED_HEADERS = re.compile(r"(torch|ATen|c10)/|cublas|cudnn|cutensor|^(thread|future|dlfcn\.h|Python\.h|pthread\.h"
                             r"|unistd\.h|sys/\w+\.h)$")
_ATTRIBUTE_SPACES = ("device", "global", "shared", "constant", "managed", "host")


def _hit(token: Token, what: str, text: str | None = None) -> str:
    return f"line {token.line}: {what}: {(text if text is not None else token.text)[:120]!r}"


def _normalize(tokens: list[Token]) -> list[Token]:
    """`__attribute__((device))` (how the preprocessor spells `__device__`) as the one token `__device__`."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        window = [t.text for t in tokens[i:i + 6]]
        if (len(window) == 6 and window[0] == "__attribute__" and window[1:3] == ["(", "("]
                and window[3] in _ATTRIBUTE_SPACES and window[4:6] == [")", ")"]):
            out.append(Token(ID, f"__{window[3]}__", tokens[i].line))
            i += 6
            continue
        out.append(tokens[i])
        i += 1
    return out


def _identifier_hits(tokens: list[Token]) -> list[str]:
    hits = []
    for i, tok in enumerate(tokens):
        if tok.kind == ID:
            if tok.text == "new" and i and tokens[i - 1].text == "operator":
                continue
            hits += [_hit(tok, what) for what, rule in _ID_RULES if rule.fullmatch(tok.text)]
        elif tok.kind == STRING:
            hits += [_hit(tok, what, match.group()) for what, rule in _STRING_RULES
                     for match in [rule.search(tok.text)] if match]
    return hits


def _sequence_hits(tokens: list[Token]) -> list[str]:
    texts = [t.text for t in tokens]
    hits = []
    for what, seq in _SEQUENCES:
        for i in range(len(texts) - len(seq) + 1):
            if tuple(texts[i:i + len(seq)]) == seq and tokens[i].kind == ID:
                hits.append(_hit(tokens[i], what, " ".join(seq)))
    for i, tok in enumerate(tokens[:-1]):
        if (tok.text == "namespace" and tokens[i + 1].text in RESERVED_NAMESPACES
                and not (i and tokens[i - 1].text == "using")):
            hits.append(_hit(tok, NAMESPACES, f"namespace {tokens[i + 1].text}"))
    return hits


def _bracketed(tokens: list[Token], start: int, close: str) -> tuple[list[list[Token]], int]:
    """The top-level comma-separated groups from `start` to the matching `close`, and the index after it."""
    groups: list[list[Token]] = [[]]
    depth = 0
    i = start
    while i < len(tokens):
        text = tokens[i].text
        if depth == 0 and text == close:
            return groups, i + 1
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
        if depth == 0 and text == ",":
            groups.append([])
        else:
            groups[-1].append(tokens[i])
        i += 1
    return groups, i


def _default_stream(group: list[Token]) -> bool:
    """A stream expression that names the legacy or per-thread default stream: 0, nullptr, NULL, a cast integer."""
    inner = [t for t in group if t.text not in ("(", ")")]
    return (bool(inner) and (inner[-1].kind == NUMBER or inner[-1].text in ("nullptr", "NULL"))
            or any(t.text in ("cudaStreamLegacy", "cudaStreamPerThread") for t in inner))


def _stream_hits(tokens: list[Token]) -> list[str]:
    """Launches without the caller's stream: `<<<g, b>>>`, `<<<g, b, smem>>>`, `<<<g, b, smem, 0>>>`, and integers
    cast to a stream (how the preprocessor spells cudaStreamPerThread)."""
    hits = []
    for i, tok in enumerate(tokens):
        if tok.text == "<<<":
            args, _ = _bracketed(tokens, i + 1, ">>>")
            if len(args) < 4 or _default_stream(args[3]):
                hits.append(_hit(tok, STREAMS, "<<<" + ", ".join(" ".join(t.text for t in a) for a in args) + ">>>"))
        if tok.text in ("cudaStream_t", "CUstream") and i + 2 < len(tokens):
            after = [t for t in tokens[i + 1:i + 5] if t.text not in (")", ">", "(")]
            if after and after[0].kind == NUMBER and tokens[i - 1].text in ("(", "<"):
                hits.append(_hit(tok, STREAMS, f"({tok.text}){after[0].text}"))
    return hits


def _declaration(tokens: list[Token], start: int) -> tuple[list[Token], str]:
    """Tokens from `start` to the first of ; = { ( [ , at depth 0, and that terminator ("" at the end)."""
    out = []
    depth = 0
    for tok in tokens[start:]:
        if tok.text == "<":
            depth += 1
        elif tok.text == ">" and depth:
            depth -= 1
        elif depth == 0 and tok.text in (";", "=", "{", "(", "[", ","):
            return out, tok.text
        out.append(tok)
    return out, ""


def _mutable(decl: list[Token]) -> bool:
    """Whether a declaration's variable can be written: not const/constexpr, or a pointer that is not itself const."""
    texts = [t.text for t in decl]
    stars = [i for i, t in enumerate(texts) if t in ("*", "&")]
    if stars:
        return "const" not in texts[stars[-1]:]
    return not {"const", "constexpr"} & set(texts)


def _state_hits(tokens: list[Token]) -> list[str]:
    """static / thread_local variables and __device__ / __managed__ variables that can be written."""
    hits = []
    for i, tok in enumerate(tokens):
        if tok.text not in ("static", "thread_local", "__thread", "__device__", "__managed__"):
            continue
        decl, end = _declaration(tokens, i + 1)
        if end == "(" and not (i + len(decl) + 2 < len(tokens) and tokens[i + len(decl) + 2].kind in (NUMBER, STRING)):
            continue   # a function
        if end == "" or not decl or decl[-1].kind != ID or decl[-1].text == "operator":
            continue
        if any(t.text in ("__shared__", "__constant__") for t in decl):
            continue   # per-block shared memory; constants
        if _mutable(decl):
            hits.append(_hit(tok, STATE, " ".join(t.text for t in [tok, *decl])))
    return hits


def _half_aliases(tokens: list[Token]) -> dict[str, Token]:
    """Every typedef / using alias of a half type (HALF_TYPES, or an earlier alias; not of a pointer to one), with
    the token that declares it."""
    aliases: dict[str, Token] = {}
    for i, tok in enumerate(tokens):
        if tok.text == "typedef":
            decl, end = _declaration(tokens, i + 1)
            body = [t.text for t in decl]
            if end == ";" and len(body) >= 2 and set(body[:-1]) & (HALF_TYPES | set(aliases)) and "*" not in body:
                aliases[body[-1]] = tok
        elif tok.text == "using" and i + 3 < len(tokens) and tokens[i + 2].text == "=":
            decl, end = _declaration(tokens, i + 3)
            body = [t.text for t in decl]
            if end == ";" and set(body) & (HALF_TYPES | set(aliases)) and "*" not in body:
                aliases[tokens[i + 1].text] = tok
    return aliases


def _half_accumulation_hits(tokens: list[Token]) -> list[str]:
    """Variables of a half type (or an alias of one) accumulated with += / -= / x = x + ..., aliases of a half type
    named as an accumulator, and wmma accumulator fragments of a half type."""
    aliases = _half_aliases(tokens)
    halves = HALF_TYPES | set(aliases)
    hits = [_hit(tok, FP16_ACCUMULATION, f"{name} is a half type") for name, tok in aliases.items()
            if re.search(r"acc", name, re.I)]
    variables: set[str] = set()
    for i, tok in enumerate(tokens[:-2]):
        if tok.text in halves:
            j = i + 1
            while j < len(tokens) and tokens[j].text in ("const", "&", "volatile", "__restrict__", "alignas"):
                j += 1
            if j + 1 < len(tokens) and tokens[j].kind == ID and tokens[j + 1].text in ("=", ";", "[", ",", "{", "("):
                variables.add(tokens[j].text)
        if tok.text == "accumulator":
            args, _ = _bracketed(tokens, i + 1, ">")
            if any(t.text in halves for group in args for t in group):
                hits.append(_hit(tok, FP16_ACCUMULATION, "wmma accumulator fragment of a half type"))
    for i, tok in enumerate(tokens):
        if tok.kind != ID or tok.text not in variables or (i and tokens[i - 1].text in (".", "->", "::")):
            continue
        j = i + 1
        if j < len(tokens) and tokens[j].text == "[":
            _, j = _bracketed(tokens, j + 1, "]")
        after = [t.text for t in tokens[j:j + 3]]
        if after[:1] in (["+="], ["-="]) or (after[:1] == ["="] and after[1:2] == [tok.text] and after[2:3] in
                                                 (["+"], ["-"])):
            hits.append(_hit(tok, FP16_ACCUMULATION, f"{tok.text} (a half-precision variable) {after[0]} ..."))
    return hits


def _directive_hits(tok: Token) -> list[str]:
    text = tok.text
    hits = []
    if re.match(r"#\s*(line\b|\d)", text):
        hits.append(_hit(tok, LINE_DIRECTIVES))
    if re.match(r"#\s*(define|undef)\s+(__\w+|_[A-Z]\w*)", text):
        hits.append(_hit(tok, RESERVED_MACROS))
    include = re.match(r"#\s*(include|include_next|import|embed)\b\s*(.*)", text)
    if include:
        target = include.group(2).strip()
        name = target[1:-1] if target[:1] in "<\"" and target[-1:] in ">\"" else ""
        if (include.group(1) != "include" or target.startswith(("\"/", "</")) or ".." in target
                or (name and _BANNED_HEADERS.search(name))):
            hits.append(_hit(tok, INCLUDES))
    return hits


def _macro_body(tok: Token) -> list[Token]:
    """The replacement list of a #define, as tokens (a macro's body is code wherever it is expanded)."""
    match = re.match(r"#\s*define\s+\w+(\([^)]*\))?(.*)", tok.text, re.S)
    return tokenize(match.group(2), first_line=tok.line) if match else []


def _code_hits(tokens: list[Token]) -> list[str]:
    tokens = _normalize(tokens)
    return (_identifier_hits(tokens) + _sequence_hits(tokens) + _stream_hits(tokens) + _state_hits(tokens)
            + _half_accumulation_hits(tokens))


def scan(source: str) -> list[str]:
    """Every banned construct in `source` as written, as "line N: <what is banned>: <the text>" (empty: nothing
    found): its directives, its code, and the bodies of its macros read as code."""
    tokens = tokenize(source)
    directives = [t for t in tokens if t.kind == DIRECTIVE]
    code = [t for t in tokens if t.kind != DIRECTIVE]
    macro_code = [t for d in directives for t in _macro_body(d)]
    hits = [h for d in directives for h in _directive_hits(d)] + _code_hits(code) + _code_hits(macro_code)
    return sorted(set(hits), key=lambda h: (int(h.split(":")[0].split()[1]), h))


def scan_preprocessed(preprocessed: str, source: str) -> list[str]:
    """Every banned construct in the lines of the file `source` as the preprocessor's output (`gcc -E`) has them,
    macros expanded; the same hit format as `scan`."""
    text, numbers = preprocessed_lines(preprocessed, source)
    tokens = [t for t in tokenize(text, line_numbers=numbers or [1]) if t.kind != DIRECTIVE]
    hits = _code_hits(tokens)
    return sorted(set(hits), key=lambda h: (int(h.split(":")[0].split()[1]), h))


# What the scan refuses, for prompts: (what is banned, where it is looked for).
BANNED: tuple[tuple[str, str], ...] = (
    (STREAMS, "code"), (CAPTURE, "code"), (SYNC, "code"), (LIBRARIES, "code and includes"), (ALLOCATION, "code"),
    (STATE, "code and the object's writable data"), (PERSISTING_L2, "code"), (THREADS, "code and includes"),
    (LOADING, "code, strings and the object's symbols"), (INITIALIZERS, "code and the object's sections"),
    (FP16_ACCUMULATION, "code, PTX strings and the evaluator's exact-integer checks"), (NAMESPACES, "code"),
    (RESERVED, "code"), (LINE_DIRECTIVES, "directives"), (RESERVED_MACROS, "directives"), (INCLUDES, "directives"),
)
