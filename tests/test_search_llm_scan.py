"""The static scan of search-written kernel sources, as written: every banned class is caught with its line through
the spellings a cheat would try (macros, splices, literals split or hiding `//`, aliases), and legitimate sources
(the generated kernels, the naive fp32-accumulating kernel, comments and strings that name banned calls) pass."""
from __future__ import annotations

import pytest

from cudal2_catalog.codegen import default_configs, render
from search.cxx_tokens import STRING, preprocessed_lines, tokenize
from search.llm import static_scan as s
from search.llm.static_scan import scan, scan_preprocessed
from search_abi_kernels import BODIES, CHEATS, naive_source


@pytest.mark.parametrize("label", sorted(CHEATS))
def test_cheats_are_caught(label):
    hits = scan(CHEATS[label])
    assert hits and all(hit.startswith("line ") for hit in hits)


@pytest.mark.parametrize("snippet, what", [
    # streams: private, legacy default (no stream argument, or 0), per-thread, the preprocessor's spelling of it
    ("cudaEventCreate(&e);", s.STREAMS),
    ("cudaStream\\\nCreate(&s);", s.STREAMS),                               # a backslash-newline splice
    ("k<<<grid, block>>>(a);", s.STREAMS),
    ("k<<<grid, block, 0, 0>>>(a);", s.STREAMS),
    ("k<<<grid, block, 0, cudaStreamPerThread>>>(a);", s.STREAMS),
    ("k<<<grid, block, 0, ((cudaStream_t)0x2)>>>(a);", s.STREAMS),
    ("#define LAUNCH(k) k<<<grid, block>>>\nLAUNCH(kern)(a);", s.STREAMS),   # a #define'd launch
    ("cudaStreamIsCapturing(st, &c);", s.CAPTURE),
    ("cudaStreamSynchronize(s);", s.SYNC),
    ('const char* u = "https://example.com"; cudaDeviceSynchronize();', s.SYNC),   # `//` inside a string
    ("cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);", s.SYNC),
    ("cublasLtMatmul(h);", s.LIBRARIES),
    ("at::matmul(x, y);", s.LIBRARIES),
    ("void* w; cudaMalloc(&w, 1 << 20);", s.ALLOCATION),
    ("float* w = new float[1024];", s.ALLOCATION),
    ("static const void* last_a = nullptr;", s.STATE),
    ("static const void* last[8]; static int next;", s.STATE),
    ("thread_local int calls = 0;", s.STATE),
    ("__device__ int counter;", s.STATE),
    ("attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;", s.PERSISTING_L2),
    ("std::thread t(work);", s.THREADS),
    ('void* f = dlsym(RTLD_DEFAULT, "cudaStreamCreate");', s.LOADING),
    ('auto f = get("cuStream" "Create");', s.LOADING),                         # a name split across literals
    ("PyRun_SimpleString(code);", s.LOADING),
    ("__attribute__((constructor)) static void init() {}", s.INITIALIZERS),
    ("[[gnu::constructor]] void init();", s.INITIALIZERS),
    ('asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 ...");', s.FP16_ACCUMULATION),
    ('asm("mma.sync.aligned.m16n8k16.row.col" ".f16.f16.f16.f16 ...");', s.FP16_ACCUMULATION),   # split literal
    ('asm("wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16 ...");', s.FP16_ACCUMULATION),
    ('asm("fma.rn.f16x2 %0, %1, %2, %0;");', s.FP16_ACCUMULATION),
    ("using Mma = SM80_16x8x16_F16F16F16F16_TN;", s.FP16_ACCUMULATION),
    ("r = __hadd2(r, __hmul2(x, y));", s.FP16_ACCUMULATION),
    ("typedef __half acc_t;\nacc_t acc = __float2half(0.f);\nacc += x * y;", s.FP16_ACCUMULATION),
    ("using Acc = half; Acc total{}; total = total + x;", s.FP16_ACCUMULATION),
    ("wmma::fragment<wmma::accumulator, 16, 16, 16, half> c;", s.FP16_ACCUMULATION),
    ("namespace cudal2 { void* cache; }", s.NAMESPACES),
    ("__device_stub__k();", s.RESERVED),
    ('int x __asm__("_ZN6cudal25cacheE");', s.RESERVED),
    ('#line 7 "cudal2/abi.h"', s.LINE_DIRECTIVES),
    ("#define __cudaRegisterFunction(...) evil()", s.RESERVED_MACROS),
    ('#include "/etc/hostname"', s.INCLUDES),
    ('#include "../../search/store.py"', s.INCLUDES),
    ('#include "/dev/stdin"', s.INCLUDES),
    ("#include <cublas_v2.h>", s.INCLUDES),
    ("#include <thread>", s.INCLUDES),
])
def test_each_banned_class(snippet, what):
    hits = scan(f"// header\n{snippet}\n")
    assert any(what in hit for hit in hits), hits
    assert all(hit.startswith(("line 2: ", "line 3: ", "line 4: ")) for hit in hits), hits


@pytest.mark.parametrize("variant", [v for v in BODIES if v not in ("fp16acc", "fp16acc_hidden")])
def test_plain_kernels_pass(variant):
    assert scan(naive_source("k", variant)) == []


def test_generated_kernels_pass():
    for cfg in default_configs():
        assert scan(render(cfg)) == [], cfg.name


@pytest.mark.parametrize("snippet", [
    "int a; // cudaDeviceSynchronize()\n/* cublasCreate\n */ int b;",
    'const char* msg = "cudaDeviceSynchronize is not used";',
    'asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ...");',          # fp32 accumulation
    "struct S { S(const S&) = delete; };",
    "using namespace cute;",
    "__shared__ float tile[64]; static __shared__ float more[8]; extern __shared__ char dynamic[];",
    "static const cudal2_kernel k = {1};",
    "static constexpr int kTile = 64;",
    "static void helper(int x) {}",
    "float acc = 0.f; acc += __half2float(a) * __half2float(b); const __half* p = a; p += 8;",
    "k<<<grid, block, 0, static_cast<cudaStream_t>(p->stream)>>>(a);",
    '#include "cudal2/abi.h"\n#include <cuda_fp16.h>\n#define CUDAL2_SM90_GDC 0',
])
def test_legitimate_code_passes(snippet):
    assert scan(snippet) == []


def test_tokens_join_literals_and_keep_lines():
    tokens = tokenize('x = "a" /* c */ "b"\n  R"d(q"//)d" u8"z";\ny = "//"; z')
    strings = [t for t in tokens if t.kind == STRING]
    assert [t.text for t in strings] == ['abq"//z', "//"] and [t.line for t in strings] == [1, 3]
    assert tokens[-1].text == "z" and tokens[-1].line == 3


def test_preprocessed_scan_reads_only_the_source_lines():
    """Line markers decide whose lines are read: a header's declarations are not the candidate's code."""
    text = ('# 1 "/cuda/include/cuda_runtime_api.h" 1\nint cudaStreamCreate(void**);\n'
            '# 12 "/tmp/k.cu"\nvoid f() { cudaStreamCreate(0); }\n\nint ok;\n')
    kept, numbers = preprocessed_lines(text, "/tmp/k.cu")
    assert "int ok;" in kept and numbers[0] == 12
    hits = scan_preprocessed(text, "/tmp/k.cu")
    assert len(hits) == 1 and hits[0].startswith("line 12: ") and s.STREAMS in hits[0]
