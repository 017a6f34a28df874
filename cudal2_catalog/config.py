"""The kernel configuration: one frozen dataclass whose `name` is a kernel's whole identity.

File names (`kernels/<arch_dir>/<name>.cu`), C symbols (`cudal2_kernel_<name>`), table entries and log lines all
derive from `HgemmConfig.name`; nothing else spells a kernel name.
"""
from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

FAMILIES = ("sm90_tma_ws", "sm80_cute", "decode", "tiny")
DTYPES = ("fp16", "bf16")
LAYOUTS = ("nn", "nt")
EPILOGUES = ("nosmem",)         # non-default values of HgemmConfig.epilogue (name tokens)
SPLITK_POLICIES = ("workspace",)  # non-default values of HgemmConfig.splitk (name tokens)
WEIGHT_STREAMS = ("evictfirst", "tma")  # non-default values of HgemmConfig.weight_stream (name tokens)
# Code-level fields of one family's template (HgemmConfig.reg_pipeline, smem_prefetch, stagger_ab, weight_stream): any
# other family must leave them at their defaults, so that no other kernel's name carries their tokens.
FAMILY_FIELDS = {"reg_pipeline": "sm80_cute", "smem_prefetch": "sm80_cute", "stagger_ab": "sm80_cute",
                 "weight_stream": "decode"}

# Where each family's generated sources live, and which GPU architectures they are compiled for.
ARCH_DIR = {"sm90_tma_ws": "sm90", "sm80_cute": "sm80", "decode": "sm80", "tiny": "sm80"}


class Knobs(NamedTuple):
    """Runtime knobs of one kernel call (cudal2_problem's splits/swizzle/raster; 0 = the kernel's default).

    Their meaning is per family (see each family module and its header); table entries carry them per problem.
    """

    splits: int = 0
    swizzle: int = 0
    raster: int = 0

    def to_dict(self) -> dict[str, int]:
        """{"splits", "swizzle", "raster"}: the knobs as a table entry / JSON point / store row spells them."""
        return dict(self._asdict())

    @classmethod
    def from_dict(cls, doc: dict) -> "Knobs":
        """The knobs of a dict holding some of splits / swizzle / raster (missing ones 0); other keys are ignored,
        so a whole table entry or point may be passed. Raises ValueError for a value that is not an int >= 0."""
        values = {name: doc.get(name, 0) for name in cls._fields}
        for name, value in values.items():
            if type(value) is not int or value < 0:
                raise ValueError(f"knob {name}={value!r}: knobs are ints >= 0 ({', '.join(cls._fields)})")
        return cls(**values)


DEFAULT_KNOBS = Knobs()


@dataclasses.dataclass(frozen=True, order=True)
class HgemmConfig:
    """Compile-time parameters of one kernel instantiation.

    Fields a family does not use stay at their defaults and are left out of the name.
    family: one of FAMILIES. dtype: "fp16" | "bf16". layout: "nn" (B is [K, N]) | "nt" (B is [N, K]).
    tile_m/tile_n/tile_k: CTA tile. stages: pipeline depth (0 = the family's automatic choice).
    cluster_m/cluster_n: thread-block cluster (sm90). schedule: "coop" | "pingpong" (sm90).
    scheduler: "persistent" | "streamk" (sm90). warps: warps per CTA (sm80, decode, tiny).
    swap_ab: compute D^T = B A^T so that the weight rows tile CUTLASS's M and the small M its N (sm90, NT only):
    tile_m then counts weight rows and tile_n rows of A.
    epilogue: "" (the family's default) | "nosmem" (accumulators stored straight from registers, no shared memory
    staging: sm90 without the TMA store; sm80_cute with 32-bit stores of column pairs instead of 128-bit stores of
    the tile staged in shared memory). splitk: "" (the family's default reduction of split-K partials) | "workspace"
    (sm80_cute: partials always go through the workspace and a reduction kernel, never a cluster launch).
    Code-level fields of the sm80_cute mainloop (FAMILY_FIELDS; every other family leaves them at their defaults):
    reg_pipeline: register fragment buffers (2 = ldmatrix of k-block i+1 while computing i; 1 = load k-block i, then
    compute it; 3 = two k-blocks ahead). smem_prefetch: how many K tiles cp.async runs ahead (0 = stages-1).
    stagger_ab: issue a tile's B copies one k-block after its A copies, between the MMAs.
    Code-level field of the decode family: weight_stream: "" (cp.async into padded rows) | "evictfirst" (the same
    copies with an L2 evict-first hint) | "tma" (2-D tensor-map copies into a swizzled ring, evict-first, sm_90).
    """

    family: str
    dtype: str
    layout: str
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int = 0
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = ""
    scheduler: str = ""
    warps: int = 0
    swap_ab: bool = False
    epilogue: str = ""
    splitk: str = ""
    reg_pipeline: int = 2
    smem_prefetch: int = 0
    stagger_ab: bool = False
    weight_stream: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}; supported: {FAMILIES}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; supported: {DTYPES}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; supported: {LAYOUTS}")
        if self.epilogue and self.epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {self.epilogue!r}; supported: '' (default) or one of {EPILOGUES}")
        if self.splitk and self.splitk not in SPLITK_POLICIES:
            raise ValueError(f"unknown splitk {self.splitk!r}; supported: '' (default) or one of {SPLITK_POLICIES}")
        if self.weight_stream and self.weight_stream not in WEIGHT_STREAMS:
            raise ValueError(f"unknown weight_stream {self.weight_stream!r}; supported: '' (default) or one of "
                             f"{WEIGHT_STREAMS}")
        if type(self.reg_pipeline) is not int or self.reg_pipeline < 1:
            raise ValueError(f"reg_pipeline {self.reg_pipeline!r}: register fragment buffers, an int >= 1")
        if type(self.smem_prefetch) is not int or self.smem_prefetch < 0:
            raise ValueError(f"smem_prefetch {self.smem_prefetch!r}: K tiles loaded ahead, an int >= 0 (0 = stages-1)")
        for field, family in FAMILY_FIELDS.items():
            default = HgemmConfig.__dataclass_fields__[field].default
            if self.family != family and getattr(self, field) != default:
                raise ValueError(f"{field} is a {family} field: leave it at {default!r} for {self.family}")

    @property
    def name(self) -> str:
        """The kernel's identity, e.g. `sm90_tma_ws_fp16_nt_128x256x64_s0_c1x2_coop_persistent`."""
        parts = [self.family, self.dtype, self.layout, f"{self.tile_m}x{self.tile_n}x{self.tile_k}", f"s{self.stages}"]
        if (self.cluster_m, self.cluster_n) != (1, 1) or self.family == "sm90_tma_ws":
            parts.append(f"c{self.cluster_m}x{self.cluster_n}")
        if self.warps:
            parts.append(f"w{self.warps}")
        if self.schedule:
            parts.append(self.schedule)
        if self.scheduler:
            parts.append(self.scheduler)
        if self.swap_ab:
            parts.append("swap")
        if self.epilogue:
            parts.append(self.epilogue)
        if self.splitk:
            parts.append(self.splitk)
        if self.reg_pipeline != 2:
            parts.append(f"r{self.reg_pipeline}")
        if self.smem_prefetch:
            parts.append(f"p{self.smem_prefetch}")
        if self.stagger_ab:
            parts.append("stagger")
        if self.weight_stream:
            parts.append(self.weight_stream)
        return "_".join(parts)

    @property
    def arch_dir(self) -> str:
        """The folder under `kernels/` that holds this kernel's generated source."""
        return ARCH_DIR[self.family]

    @classmethod
    def from_name(cls, name: str) -> "HgemmConfig":
        """Parses a name produced by `name` back into its config (inverse of `name`)."""
        family = next((f for f in FAMILIES if name.startswith(f + "_")), None)
        if family is None:
            raise ValueError(f"kernel name {name!r} does not start with a known family {FAMILIES}")
        rest = name[len(family) + 1:].split("_")
        if len(rest) < 4:
            raise ValueError(f"kernel name {name!r} is too short")
        dtype, layout, tile, stages, *extras = rest
        tm, tn, tk = (int(x) for x in tile.split("x"))
        fields: dict = dict(family=family, dtype=dtype, layout=layout, tile_m=tm, tile_n=tn, tile_k=tk,
                            stages=int(stages.lstrip("s")))
        for token in extras:
            if m := re.fullmatch(r"c(\d+)x(\d+)", token):
                fields["cluster_m"], fields["cluster_n"] = int(m[1]), int(m[2])
            elif m := re.fullmatch(r"w(\d+)", token):
                fields["warps"] = int(m[1])
            elif token in ("coop", "pingpong"):
                fields["schedule"] = token
            elif token in ("persistent", "streamk"):
                fields["scheduler"] = token
            elif token == "swap":
                fields["swap_ab"] = True
            elif token in EPILOGUES:
                fields["epilogue"] = token
            elif token in SPLITK_POLICIES:
                fields["splitk"] = token
            elif m := re.fullmatch(r"r(\d+)", token):
                fields["reg_pipeline"] = int(m[1])
            elif m := re.fullmatch(r"p(\d+)", token):
                fields["smem_prefetch"] = int(m[1])
            elif token == "stagger":
                fields["stagger_ab"] = True
            elif token in WEIGHT_STREAMS:
                fields["weight_stream"] = token
            else:
                raise ValueError(f"kernel name {name!r}: unknown part {token!r}")
        cfg = cls(**fields)
        if cfg.name != name:
            raise ValueError(f"kernel name {name!r} is not canonical (expected {cfg.name!r})")
        return cfg


def config_of(name: str) -> HgemmConfig | None:
    """The config a generated kernel's name spells; None for any other kernel name (a search-written source kernel,
    a kernel of an extra library)."""
    try:
        return HgemmConfig.from_name(name)
    except ValueError:
        return None
