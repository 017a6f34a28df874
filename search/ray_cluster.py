"""The Ray side of `python -m search run|resume --backend ray`: its options, joining or starting the Ray cluster,
and the RayBackend a run gets (ray is an optional extra, imported only when a run uses it).

Without `--ray-address` (and RAY_ADDRESS unset) the run starts a local Ray instance over this machine's CPUs and
GPUs and stops it at the end; with it, the run joins that cluster (`auto`: the one `ray start` left on this host).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from search.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --ray-address and --sim-workers to a run or resume parser."""
    parser.add_argument("--ray-address", default=None,
                        help="--backend ray: join this Ray cluster (host:port, or auto: the one `ray start` left "
                             "here) instead of starting a local one")
    parser.add_argument("--sim-workers", type=int, default=0, metavar="N",
                        help="--backend ray: N actors holding the simulated evaluator instead of one real evaluator "
                             "per GPU (machines without GPUs; each evaluation sleeps --sim-delay-ms)")


def options(ns: argparse.Namespace, backend: str) -> dict[str, Any]:
    """The Ray options of a parsed command line, for `backend_for_run`; UserError when they are given to a run
    whose backend is not ray."""
    given = {"ray_address": ns.ray_address, "sim_workers": ns.sim_workers}
    if backend != "ray" and any(given.values()):
        raise UserError(f"--ray-address and --sim-workers are options of --backend ray, not --backend {backend}")
    if ns.sim_workers < 0:
        raise UserError(f"--sim-workers must be 0 (real GPUs) or a positive count, got {ns.sim_workers}")
    return given


def connect(address: str | None = None, **init_kwargs) -> bool:
    """Connects this process to Ray: to `address` if given, else to the cluster RAY_ADDRESS names, else to a new
    local instance (`init_kwargs`, e.g. num_cpus, go to ray.init). Nothing when already connected. True when this
    call connected (the caller then disconnects with ray.shutdown)."""
    try:
        import ray  # noqa: PLC0415 (optional extra)
    except ImportError as exc:
        raise UserError("--backend ray needs the ray package (the optional extra: pip install '.[ray]')") from exc
    if ray.is_initialized():
        return False
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False,
             **init_kwargs)
    return True


def backend_for_run(args, ray_address: str | None = None, sim_workers: int = 0):
    """The RayBackend of a run's `args` (search.loop.RunArgs): `sim_workers` simulated actors (seed, arch and
    --sim-delay-ms from the run), else one LocalBackend actor per GPU of the cluster with nvcc builds into the run's
    artifacts folder. It disconnects from Ray when closed if it connected."""
    from search.backends.ray_backend import RayBackend  # noqa: PLC0415 (imports ray's users only when used)
    disconnect = connect(ray_address)
    try:
        if sim_workers:
            return RayBackend.simulated(sim_workers, seed=args.seed, eval_delay_s=args.sim_delay_ms / 1000,
                                        arch=args.arch, compile_only=args.compile_only, disconnect=disconnect)
        return RayBackend.on_gpus(Path(args.artifacts), args.arch, compile_only=args.compile_only,
                                  disconnect=disconnect)
    except BaseException:
        if disconnect:
            import ray  # noqa: PLC0415
            ray.shutdown()
        raise
