"""Cheating C ABI kernel sources for the tests of the search's defences, by the defence that must catch them.

Each is the naive fp16 NT kernel of `search_abi_kernels` with one cheat added, spelled to get past the defences
before the one its dictionary names: PREPROCESSOR_CHEATS pass the scan of the source as written and are caught in
the preprocessed text; INCLUDE_CHEATS reach files outside the project, CUDA and CUTLASS through a macro; OBJECT_CHEATS
are caught in the compiled object (the tests compile them directly); RUNTIME_CHEATS pass or bypass every static
check and must be caught by the GPU evaluator.
"""
from __future__ import annotations

from pathlib import Path

from search_abi_kernels import TEMPLATE, naive_source

REPO = Path(__file__).resolve().parent.parent
PASTE = "#define CAT(a, b) a##b"

PREPROCESSOR_CHEATS = {
    "pasted_stream_create": naive_source("cheat_pasted_stream_create", includes=PASTE,
                                         launch_prefix="cudaStream_t s; CAT(cudaStream, Create)(&s);", stream="s"),
    "pasted_per_thread_stream": naive_source("cheat_pasted_per_thread_stream", includes=PASTE,
                                             stream="CAT(cudaStreamPer, Thread)"),
    "macro_default_stream": naive_source("cheat_macro_default_stream", includes="#define CALLER_STREAM 0",
                                         stream="CALLER_STREAM"),
    "pasted_device_sync": naive_source("cheat_pasted_device_sync", includes=PASTE,
                                       launch_suffix="CAT(cudaDevice, Synchronize)();"),
    "pasted_dlsym": naive_source("cheat_pasted_dlsym", includes=PASTE + '\nextern "C" void* CAT(dl, sym)(void*, const char*);',
                                 launch_prefix='CAT(dl, sym)(nullptr, "cudaStreamCreate");'),
    "macro_fp16_accumulator": TEMPLATE.format(
        name="cheat_macro_fp16_accumulator", includes="#define ACCUMULATOR __half\n#define ZERO __float2half(0.f)",
        launch_prefix="", launch_suffix="", stream="static_cast<cudaStream_t>(p->stream)",
        body="""ACCUMULATOR acc = ZERO;
  for (int64_t i = 0; i < k; ++i) acc += a[row * lda + i] * b[col * ldb + i];
  d[row * ldd + col] = acc;"""),
}

INCLUDE_CHEATS = {
    "host_file": '#define HOST_FILE "/etc/hostname"\n#include HOST_FILE\n' + naive_source("cheat_host_file"),
    "project_file": f'#define PROJECT_FILE "{REPO}/search/store.py"\n#include PROJECT_FILE\n'
                    + naive_source("cheat_project_file"),
    "dev_stdin": '#define STDIN "/dev/stdin"\n#include STDIN\n' + naive_source("cheat_dev_stdin"),
}
ENDLESS_INCLUDE = '#define ENDLESS "/dev/zero"\n#include ENDLESS\n' + naive_source("cheat_dev_zero")

_CONSTRUCTOR = '#include <cstdlib>\n__attribute__((constructor)) static void at_load() { if (std::getenv("CUDAL2_X")) std::abort(); }'
OBJECT_CHEATS = {   # label -> (source, what the object check must say)
    "constructor": (naive_source("cheat_constructor", includes=_CONSTRUCTOR), "runs when the library loads"),
    "static_initializer": (naive_source(
        "cheat_static_initializer",
        includes='#include <cstdlib>\nstruct Boot { Boot() { if (std::getenv("CUDAL2_X")) std::abort(); } };\nBoot boot;'),
        "static initialiser"),
    "pointer_cache": (naive_source("cheat_pointer_cache", launch_prefix=(
        "static const void* last = nullptr; if (last == p->d) return CUDAL2_OK; last = p->d;")), "state between calls"),
    "python": (naive_source("cheat_python", includes='extern "C" int PyRun_SimpleString(const char*);',
                            launch_prefix='PyRun_SimpleString("import os");'), "calls into Python"),
    "dlsym": (naive_source("cheat_dlsym", includes='extern "C" void* dlsym(void*, const char*);',
                           launch_prefix='dlsym(nullptr, "cudaStreamCreate");'), "loads code"),
    "stream_create": (naive_source("cheat_stream_create", launch_prefix="cudaStream_t s; cudaStreamCreate(&s);",
                                   stream="s"), "creates a stream"),
    "device_sync": (naive_source("cheat_device_sync", launch_suffix="cudaDeviceSynchronize();"), "synchronises"),
    "device_variable": (naive_source("cheat_device_variable", includes="__device__ int calls;"), "state between"),
}

# The runner's Python, patched at load: the runner reports replays 100x faster than they ran.
_LIE = ("import sys; r = sys.modules['__main__'].Runtime; f = r.elapsed_ms; "
        "r.elapsed_ms = lambda self, a, b: f(self, a, b) / 100")
_PATCH_PYTHON = f'''extern "C" {{ int PyGILState_Ensure(void); void PyGILState_Release(int); int PyRun_SimpleString(const char*); }}
__attribute__((constructor)) static void patch_runner() {{
  const int gil = PyGILState_Ensure();
  PyRun_SimpleString("{_LIE}");
  PyGILState_Release(gil);
}}'''
FP16_ROUNDED_BODY = """__half acc = __float2half(0.f);
  for (int64_t i = 0; i < k; ++i) acc = __float2half(__half2float(acc) + __half2float(a[row * lda + i]) * __half2float(b[col * ldb + i]));
  d[row * ldd + col] = acc;"""
RUNTIME_CHEATS = {
    "legacy_stream": naive_source("cheat_legacy_stream", stream="0"),
    "per_thread_stream": naive_source("cheat_per_thread_stream", stream="cudaStreamPerThread"),
    "private_stream": naive_source("cheat_private_stream", stream="s", launch_prefix=(
        "static cudaStream_t s = nullptr; if (!s) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);")),
    "pointer_skip": naive_source("cheat_pointer_skip", launch_prefix=(
        "static const void* seen[4096]; static int count = 0;\n"
        "  for (int i = 0; i < count; ++i) if (seen[i] == p->d) return CUDAL2_OK;\n"
        "  if (count < 4096) seen[count++] = p->d;")),
    "fp16_rounded": TEMPLATE.format(name="cheat_fp16_rounded", includes="", launch_prefix="", launch_suffix="",
                                    stream="static_cast<cudaStream_t>(p->stream)", body=FP16_ROUNDED_BODY),
    "lying_runner": naive_source("cheat_lying_runner", includes=_PATCH_PYTHON),
}
