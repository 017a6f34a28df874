# temporary (untracked) GPU validation driver; deleted after the run
import glob, os, sys, site, subprocess, time, types, json
out = os.environ["OUT"]
from benchmarks import grid, report
def step(name, argv, rep_ours="torch"):
    t = time.time()
    rc = grid.main(argv)
    print(f"[{name}] grid rc={rc} {time.time()-t:.1f}s", flush=True)
    runf = argv[argv.index("--out") + 1]
    if os.path.exists(runf):
        for p in report.make_report(runf, ours=rep_ours):
            print("  ", p)
which = sys.argv[1]
if which == "torch":
    step("kernel+offline s20", ["--sample", "20", "--seed", "1", "--impls", "torch", "--modes", "kernel,offline",
                                "--out", f"{out}/v/g1000-sample20.json"])
    step("server s6", ["--sample", "6", "--seed", "2", "--impls", "torch", "--modes", "server",
                       "--out", f"{out}/v/server6.json"])
    step("cold s6", ["--sample", "6", "--seed", "3", "--impls", "torch", "--modes", "kernel", "--l2", "cold",
                     "--out", f"{out}/v/cold6.json"])
    step("llm s12", ["--shapes", "llm", "--sample", "12", "--impls", "torch", "--modes", "kernel",
                     "--out", f"{out}/v/llm12.json"])
else:
    import torch
    from torch.utils.cpp_extension import load
    sp = site.getsitepackages()[0]
    incs = sorted({os.path.dirname(p) for p in glob.glob(f"{sp}/nvidia/**/cublas_v2.h", recursive=True)})
    libs = sorted(glob.glob(f"{sp}/nvidia/**/libcublas.so*", recursive=True))
    print("cublas inc", incs, "libs", libs, flush=True)
    wrapper = "/tmp/wrap.cpp"
    open(wrapper, "w").write('#include "baselines_cublas.h"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { register_cublas_baseline(m); }\n')
    ldflags = [f"-L{os.path.dirname(libs[0])}", f"-l:{os.path.basename(libs[0])}"] if libs else ["-lcublas"]
    t = time.time()
    ext = load("bench_cublas", [wrapper, "csrc/baselines_cublas.cpp"], extra_include_paths=["csrc"] + incs,
               extra_cflags=["-O2", "-std=c++20"], extra_ldflags=ldflags, with_cuda=True, verbose=False)
    print(f"built in {time.time()-t:.0f}s", flush=True)
    import cudal2_ops
    cudal2_ops._C = ext
    sys.modules["cudal2_ops._C"] = ext
    step("cublas s12", ["--sample", "12", "--seed", "4", "--impls", "torch,cublas-nn,cublas-tn",
                        "--modes", "kernel,offline", "--dtypes", "fp16,bf16", "--out", f"{out}/v/cublas12.json"])
