"""The benchmark shape sets (docs/EVALUATION.md): G1000, LLM projection shapes, odd shapes; log2(MNK) buckets and
reproducible stratified sampling."""
from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

Shape = tuple[int, int, int]

G1000_VALUES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
ODD_VALUES = (1, 3, 7, 8, 15, 16, 63, 65, 127, 1000, 1023, 4097, 12289)
ODD_COUNT = 200
ODD_RANDOM_MAX = 20000
LLM_SHAPES_FILE = Path(__file__).resolve().parent / "llm_shapes.json"

# Report buckets over log2(M*N*K): [<24), [24,28), [28,32), [32,36), [36,40), [40,43); the last one is open above.
BUCKET_EDGES = (24, 28, 32, 36, 40)
BUCKET_LABELS = ("<24", "24-28", "28-32", "32-36", "36-40", "40-43")


def log2_mnk(shape: Shape) -> float:
    """log2(M*N*K) of a shape."""
    m, n, k = shape
    return math.log2(m) + math.log2(n) + math.log2(k)


def bucket_of(shape: Shape) -> str:
    """The label of the log2(MNK) bucket holding `shape`."""
    x = log2_mnk(shape)
    for edge, label in zip(BUCKET_EDGES, BUCKET_LABELS):
        if x < edge:
            return label
    return BUCKET_LABELS[-1]


def g1000() -> list[Shape]:
    """The paper's 1000-shape grid: every (M, N, K) with each value in G1000_VALUES."""
    return list(itertools.product(G1000_VALUES, repeat=3))


def llm(path: Path = LLM_SHAPES_FILE) -> list[Shape]:
    """(M, N, K) for every model projection (N, K) in the LLM shape file and every decode/prefill M, deduplicated."""
    data = json.loads(path.read_text())
    ms = sorted(set(data["m_decode"]) | set(data["m_prefill"]))
    nks = sorted({tuple(nk) for model in data["models"].values() for nk in model["nk"].values()})
    return [(m, n, k) for (n, k) in nks for m in ms]


def odd(seed: int = 0, count: int = ODD_COUNT) -> list[Shape]:
    """Odd shapes for correctness runs: each dim from ODD_VALUES or uniform in [1, ODD_RANDOM_MAX], seeded."""
    rng = random.Random(seed)

    def dim() -> int:
        return rng.choice(ODD_VALUES) if rng.random() < 0.5 else rng.randint(1, ODD_RANDOM_MAX)

    shapes: list[Shape] = []
    seen: set[Shape] = set()
    while len(shapes) < count:
        s = (dim(), dim(), dim())
        if s not in seen:
            seen.add(s)
            shapes.append(s)
    return shapes


def stratified_sample(shapes: list[Shape], size: int, seed: int) -> list[Shape]:
    """`size` shapes with an equal share per log2(MNK) bucket (a bucket with too few shapes gives all it has and
    its unused share goes to the others), reproducible for a given seed; returned in the input order."""
    if size >= len(shapes):
        return list(shapes)
    by_bucket: dict[str, list[Shape]] = {}
    for s in shapes:
        by_bucket.setdefault(bucket_of(s), []).append(s)
    quota = {b: 0 for b in by_bucket}
    left = size
    while left > 0:
        open_buckets = sorted((b for b in by_bucket if quota[b] < len(by_bucket[b])), key=BUCKET_LABELS.index)
        share, extra = divmod(left, len(open_buckets))
        for i, b in enumerate(open_buckets):
            take = min(share + (1 if i < extra else 0), len(by_bucket[b]) - quota[b])
            quota[b] += take
            left -= take
    rng = random.Random(seed)
    chosen = {s for b in sorted(by_bucket, key=BUCKET_LABELS.index) for s in rng.sample(by_bucket[b], quota[b])}
    return [s for s in shapes if s in chosen]


def load(name: str, sample: int | None = None, seed: int = 0) -> list[Shape]:
    """Shape set `name` ("g1000", "llm" or "odd"), optionally stratified-sampled to `sample` shapes."""
    sets = {"g1000": g1000, "llm": llm, "odd": lambda: odd(seed)}
    if name not in sets:
        raise ValueError(f"unknown shape set {name!r}; choose one of {sorted(sets)}")
    shapes = sets[name]()
    return stratified_sample(shapes, sample, seed) if sample else shapes


def set_label(name: str, sample: int | None) -> str:
    """The summary's `shapes` label: e.g. "g1000", "g1000-sample100", "llm"."""
    return f"{name}-sample{sample}" if sample else name
