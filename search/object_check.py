"""Checks a search-written kernel's compiled object before it is linked or loaded anywhere.

Read from the object file itself (`search.elf_object`; nothing is run or loaded), three rules:

- No code runs when the library loads or unloads. The only initializers allowed are the CUDA registration nvcc
  generates (`__sti____cudaRegisterAll`) and the standard `<iostream>` initializer that CUTLASS's headers bring (a
  `_GLOBAL__sub_I_*` function that may reference nothing but `std::ios_base::Init`); any other `.init_array` /
  `.ctors` / `.preinit_array` entry, and any `.fini_array` / `.dtors` entry, is refused with the function it runs.
- Undefined symbols come from an allowlist: nvcc's launch stubs, the CUDA runtime's launch API (launch, attributes,
  occupancy, errors, stream-ordered memset/memcpy), the C++ runtime's basics (guards, exceptions, operator new,
  iostream, 128-bit division), a few libc/libm functions (memcpy, getenv, sqrt, ...). Anything else is refused,
  named by its class where it has one (stream or event creation, synchronisation, allocation, other libraries,
  threads, graph calls, dynamic loading and system calls, Python).
- No writable host data but what nvcc's stubs and the project's, CUTLASS's and CUDA's headers define (device
  attribute caches, registration handles): a launcher keeps no state between calls. The scan
  (`search.llm.static_scan`) refuses candidate code that declares into those namespaces or spells mangled names, so
  these names cannot be borrowed.
"""
from __future__ import annotations

import re
from pathlib import Path

from search.elf_object import (SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHN_COMMON, STT_SECTION, ElfError, ElfObject,
                               Relocation, Section)

NVCC_REGISTRATION = "_ZL24__sti____cudaRegisterAllv"
IOSTREAM_INIT = frozenset({"_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev", "__cxa_atexit", "__dso_handle",
                           "_ZStL8__ioinit"})
INITIALIZER_SECTIONS = (".init_array", ".ctors", ".preinit_array")
FINALIZER_SECTIONS = (".fini_array", ".dtors")
R_X86_64_64 = 1

# Undefined symbols a kernel object may use (full matches).
ALLOWED_UNDEFINED = re.compile("|".join((
    r"__cuda(RegisterFatBinary|RegisterFatBinaryEnd|UnregisterFatBinary|RegisterFunction|RegisterVar"
    r"|PushCallConfiguration|PopCallConfiguration|LaunchKernel|GetKernel)",
    r"cuda(LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel|GetLastError|PeekAtLastError|GetErrorString"
    r"|GetErrorName|FuncSetAttribute|FuncGetAttributes|FuncSetCacheConfig|GetDevice|DeviceGetAttribute"
    r"|GetDeviceProperties(_v2)?|Occupancy\w+|MemsetAsync|MemcpyAsync|GetDriverEntryPoint(ByVersion)?"
    r"|DriverGetVersion|RuntimeGetVersion)",
    r"__cxa_(guard_acquire|guard_release|guard_abort|atexit|thread_atexit|begin_catch|end_catch|rethrow"
    r"|allocate_exception|free_exception|throw|pure_virtual|call_unexpected)",
    r"atexit|__dso_handle|__gxx_personality_v0|_Unwind_Resume|__tls_get_addr|_GLOBAL_OFFSET_TABLE_|__stack_chk_fail",
    r"__(u?divti3|u?modti3|popcountdi2)",
    r"mem(cpy|move|set|cmp)|str(len|cmp|ncmp)|getenv|abort|__assert_fail|(f|sn|s)?printf|f?puts|fputc|putchar|fflush"
    r"|stderr|stdout",
    r"(sqrt|ceil|floor|log2|exp|exp2|pow|fabs|fmin|fmax|round|lround|llround|ldexp|frexp|log|trunc)f?",
    r"_Z(nw|na|dl|da)\w*",                                   # operator new / delete
    r"_ZSt\d+__throw_\w+|_ZSt9terminatev|_ZTVN10__cxxabiv1\w+|_ZTI\w+|_ZTS\w+",  # exceptions, type info
    r"_ZNSo\w*|_ZSt4(cerr|cout|clog)|_ZNSt8ios_base4Init(C1|D1)Ev|_ZNKSt5ctypeIcE13_M_widen_initEv"
    r"|_ZSt16__ostream_insert\w+|_ZSt4endl\w*|_ZNSt7__cxx1112basic_string\w*",   # iostream, std::string
)))
# Classes of undefined symbols with the reason they are refused (checked first, for a clearer reason).
REFUSED_UNDEFINED: tuple[tuple[str, re.Pattern], ...] = tuple((what, re.compile(pattern)) for what, pattern in (
    ("creates a stream or event (launch on the caller's stream only)", r"cu(da)?(Stream|Event)Create\w*"),
    ("synchronises the host", r"cuda(Device|Stream|Event|Thread)Synchronize|cuda(Stream|Event)Query|cuCtxSynchronize"
                              r"|cudaMemcpy(2D|3D|Peer|ToSymbol|FromSymbol)?|cudaMemset(2D|3D)?|cudaDeviceReset"),
    ("allocates device or host memory (use the caller's workspace)", r"cu(da)?Mem(Alloc|Create)\w*|cudaMalloc\w*"
                                                                       r"|cu(da)?Free\w*|cudaHostAlloc|malloc|calloc|realloc|free"),
    ("calls another GEMM library or torch", r"(cublas|cudnn|cutensor)\w*|_ZN(2at|3c10|5torch)\w*"),
    ("uses graphs or capture queries", r"cu(da)?Graph\w*|cu(da)?Stream(BeginCapture|EndCapture|IsCapturing"
                                       r"|GetCaptureInfo)\w*|cudaThreadExchangeStreamCaptureMode"),
    ("sets a persisting-L2 policy or a device limit", r"cu(da)?StreamSetAttribute|cudaDeviceSetLimit"
                                                      r"|cudaCtxResetPersistingL2Cache"),
    ("runs host callbacks or threads", r"cudaLaunchHostFunc|cudaStreamAddCallback|pthread_\w+|thrd_\w+|_ZNSt6thread\w*"),
    ("loads code or calls the system", r"dl(open|sym|vsym|mopen|addr|info|error|_iterate_phdr)|syscall|system|popen"
                                       r"|v?fork|exec\w*|mprotect|mmap|munmap|ptrace|open(at)?|fopen|read|write"
                                       r"|cuGetProcAddress\w*|__libc_\w+"),
    ("calls into Python", r"_?Py\w+"),
))


def _target(obj: ElfObject, reloc: Relocation) -> str:
    """The name a relocation refers to: the symbol, or for a section symbol the named symbol at that offset."""
    if reloc.symbol.type != STT_SECTION:
        return reloc.symbol.name
    offset = reloc.addend if reloc.type == R_X86_64_64 else reloc.addend + 4   # PC-relative: the next instruction
    for symbol in obj.symbols:
        if symbol.section == reloc.symbol.section and symbol.type != STT_SECTION and symbol.name and (
                symbol.value <= offset < symbol.value + max(symbol.size, 1)):
            return symbol.name
    return f"{reloc.symbol.name}+{offset:#x}"


def _initializer_problems(obj: ElfObject) -> list[str]:
    problems = []
    for section in obj.sections:
        if section.name.startswith(FINALIZER_SECTIONS) and section.size:
            problems.append(f"{section.name}: code runs when the library unloads (a destructor)")
        if not section.name.startswith(INITIALIZER_SECTIONS) or not section.size:
            continue
        relocs = obj.relocations_of(section)
        if len(relocs) != section.size // 8:
            problems.append(f"{section.name}: {section.size // 8} entries but {len(relocs)} relocations")
        for reloc in relocs:
            function = (obj.function_at(reloc.symbol.section, reloc.addend) if reloc.symbol.type == STT_SECTION
                        else reloc.symbol)
            name = function.name if function else _target(obj, reloc)
            if name == NVCC_REGISTRATION:
                continue
            if name.startswith("_GLOBAL__sub_I_") and function is not None:
                extra = sorted(set(_called_by(obj, function)) - IOSTREAM_INIT)
                if not extra:
                    continue
                problems.append(f"{section.name}: the static initialiser {name} runs code at load: it uses "
                                f"{', '.join(extra[:6])}")
                continue
            problems.append(f"{section.name}: {name} runs when the library loads (a constructor)")
    return problems


def _called_by(obj: ElfObject, function) -> list[str]:
    """Names the relocations inside `function`'s body refer to."""
    section = obj.sections[function.section]
    return [_target(obj, r) for r in obj.relocations_of(section)
            if function.value <= r.offset < function.value + function.size]


def _undefined_problems(obj: ElfObject) -> list[str]:
    problems = []
    for name in obj.undefined():
        refused = next((what for what, rule in REFUSED_UNDEFINED if rule.fullmatch(name)), None)
        if refused:
            problems.append(f"uses {name}: {refused}")
        elif not ALLOWED_UNDEFINED.fullmatch(name):
            problems.append(f"uses {name}, which is not on the allowlist (CUDA runtime launch API, C/C++ runtime "
                            f"basics)")
    return problems


# Writable host data a kernel object may define: nvcc's stub statics and fatbin wrapper, the iostream initializer's
# object, the personality routine's reference, and statics of the project's, CUTLASS's and CUDA's headers.
ALLOWED_WRITABLE = re.compile(
    r"_ZL20__cudaFatCubinHandle|_ZL15__fatDeviceText|_ZL22__cudaPrelinkedFatbins|_ZL\d+__nv_\w+"
    r"|_Z(GV)?ZL?\d+__device_stub__\w*E(8__handle|5__tmp)|_ZStL8__ioinit|DW\.ref\.__gxx_personality_v0"
    r"|_Z(GV|TH|TW)?Z?N(K)?(6cudal2|7cutlass|4cute|4cuda)\w*")
WRITABLE_EXEMPT = (".data.rel.ro", *INITIALIZER_SECTIONS, *FINALIZER_SECTIONS)


def _writable(section: Section) -> bool:
    return (section.flags & SHF_WRITE and section.flags & SHF_ALLOC and not section.flags & SHF_EXECINSTR
            and section.size > 0 and not section.name.startswith(WRITABLE_EXEMPT))


def _state_problems(obj: ElfObject) -> list[str]:
    problems = [f"defines the common (writable) variable {s.name}: a launcher keeps no state between calls"
                for s in obj.symbols if s.section == SHN_COMMON]
    for section in filter(_writable, obj.sections):
        symbols = sorted(obj.defined_in(section), key=lambda s: s.value)
        refused = [s.name for s in symbols if not ALLOWED_WRITABLE.fullmatch(s.name)]
        if refused:
            problems.append(f"{section.name} holds writable data {', '.join(refused[:4])}: a launcher keeps no "
                            f"state between calls (no static, thread_local or global variables)")
            continue
        covered = 0   # bytes up to here belong to a named symbol (a gap before an aligned symbol is padding)
        for symbol in [*symbols, None]:
            start = section.size if symbol is None else symbol.value
            padding = start - covered < (16 if symbol is None or start % 16 else 64)
            if not padding:
                problems.append(f"{section.name} holds {start - covered} bytes of unnamed writable data at "
                                f"{covered:#x}: a launcher keeps no state between calls")
                break
            if symbol is not None:
                covered = max(covered, symbol.value + symbol.size)
    return problems


def check_object(path: Path) -> list[str]:
    """Every reason the object at `path` may not be linked or loaded (empty: it may)."""
    try:
        obj = ElfObject.read(path)
    except (ElfError, OSError) as exc:
        return [f"cannot read {Path(path).name} as an x86-64 relocatable object: {exc}"]
    return _initializer_problems(obj) + _undefined_problems(obj) + _state_problems(obj)
