"""The static scan of search-written kernel sources: every cheat is caught with its line, legitimate sources (the
generated kernels, a naive fp32-accumulating kernel, comments that name banned calls) pass."""
from __future__ import annotations

import pytest

from cudal2_catalog.codegen import default_configs, render
from search.llm.static_scan import scan, strip_comments
from search_abi_kernels import BODIES, CHEATS, naive_source


@pytest.mark.parametrize("label", sorted(CHEATS))
def test_cheats_are_caught(label):
    hits = scan(CHEATS[label])
    assert hits and all(hit.startswith("line ") for hit in hits)


@pytest.mark.parametrize("snippet, what", [
    ("cudaEventCreate(&e);", "stream or event creation"),
    ("cudaStreamSynchronize(s);", "host synchronisation"),
    ("cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);", "host synchronisation"),
    ("cublasLtMatmul(h, ...);", "cuBLAS"),
    ("at::matmul(x, y);", "torch"),
    ("void* w; cudaMalloc(&w, 1 << 20);", "memory allocation"),
    ("float* w = new float[1024];", "memory allocation"),
    ("static const void* last_a = nullptr;", "static cache keyed by pointers"),
    ("attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;", "persisting-L2"),
    ("std::thread t(work);", "host threads"),
    ('asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 ...");', "fp16 accumulation"),
    ("using Mma = SM80_16x8x16_F16F16F16F16_TN;", "fp16 accumulation"),
])
def test_each_banned_construct(snippet, what):
    hits = scan(f"// header\n{snippet}\n")
    assert hits and all(hit.startswith("line 2: ") for hit in hits) and any(what in hit for hit in hits)


@pytest.mark.parametrize("variant", [v for v in BODIES if v != "fp16acc"])
def test_plain_kernels_pass(variant):
    assert scan(naive_source("k", variant)) == []


def test_generated_kernels_pass():
    for cfg in default_configs():
        assert scan(render(cfg)) == [], cfg.name


def test_comments_and_fp32_accumulation_pass():
    text = "int a; // cudaDeviceSynchronize()\n/* cublasCreate\n */ int b;\n"
    assert scan(text) == [] and strip_comments(text).count("\n") == text.count("\n")
    assert scan('asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");') == []   # fp32 accumulation
