"""`python -m search`'s argument values, read strictly: integers and finite numbers in their ranges, archs the kernel
catalog targets, existing files, and the problem shapes of `--shapes` (a named set, a sample, or a file checked line by
line). Every refusal says what was given, where, and what is accepted."""
from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Callable

from cudal2_catalog.config import FAMILIES
from cudal2_catalog.families import family_module
from cudal2_catalog.space import families_for
from cudal2_testing.measure import shapes as shape_sets
from search.errors import UserError

Shape = tuple[int, int, int]
MAX_DIM = 2**31 - 1  # cuBLAS takes int dimensions
INTEGER = re.compile(r"\s*[+-]?\d+\s*")
SHAPE_LINE = re.compile(r"(\d+)\s*[,\s]\s*(\d+)\s*[,\s]\s*(\d+)")
SHAPES_HELP = ("g1000, llm, sampleN (N shapes of g1000) or a file (one 'M N K' per line, or a JSON list of [M, N, K]); "
               "several joined by '+' (g1000+llm: their union, in order)")


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a decimal integer in [low, high] (64.7, true, 1e3 and 1_000 are refused)."""
    def parse(text: str) -> int:
        if not INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        value = int(text)
        if value < low or (high is not None and value > high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {value}")
        return value
    return parse


def number(low: float, high: float | None = None, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] ((low, high] with `low_open`); nan and inf are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            bound = f"greater than {low:g}" if low_open else f"at least {low:g}"
            allowed = bound if high is None else f"{bound} and at most {high:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {allowed}, got {text!r}")
        return value
    return parse


def catalog_archs() -> tuple[int, int]:
    """The lowest and highest compute capability a family of the kernel catalog targets."""
    modules = [family_module(f) for f in FAMILIES]
    return min(m.SM_MIN for m in modules), max(m.SM_MAX for m in modules)


def arch(text: str) -> int:
    """An argparse type: 'sm90' / 'sm_80' / 'sm90a' -> 90, for an arch some family of the catalog targets."""
    match = re.fullmatch(r"sm_?(\d{2,3})a?", text)
    if not match:
        raise argparse.ArgumentTypeError(f"arch must look like sm90 or sm80, got {text!r}")
    value = int(match[1])
    if not families_for(value):
        low, high = catalog_archs()
        raise argparse.ArgumentTypeError(f"no kernel family of the catalog targets sm{value}; supported: "
                                         f"sm{low} to sm{high}")
    return value


def existing_file(text: str) -> Path:
    """An argparse type: the path of an existing file."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: {'is a folder' if path.is_dir() else 'no such file'}")
    return path


def text_of(path: Path, what: str) -> str:
    """The UTF-8 text of the file `path` (UserError naming it, as `what`, when it is binary or unreadable)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path}: not a text file (byte {exc.start} is not UTF-8)") from None
    if "\x00" in text:
        raise UserError(f"{what} {path}: not a text file (it holds NUL bytes)")
    return text


def check_shape(values: list, where: str) -> Shape:
    """Three positive integers M, N, K (JSON integers: no floats, no booleans), else UserError naming `where`."""
    if len(values) != 3 or any(type(v) is not int for v in values):
        raise UserError(f"{where}: expected three integers M N K, got {json.dumps(values)[:80]}")
    if not all(1 <= v <= MAX_DIM for v in values):
        raise UserError(f"{where}: M, N and K must be from 1 to {MAX_DIM}, got {json.dumps(values)}")
    return tuple(values)


def json_item_lines(text: str) -> list[int]:
    """The line on which each item of a valid top-level JSON list starts."""
    decoder, lines, skip = json.JSONDecoder(), [], re.compile(r"[\s,]*")
    pos = text.index("[") + 1
    while True:
        pos = skip.match(text, pos).end()
        if text[pos] == "]":
            return lines
        lines.append(text.count("\n", 0, pos) + 1)
        pos = decoder.raw_decode(text, pos)[1]


def shapes_of_json(path: Path, text: str) -> list[Shape]:
    """The shapes of a JSON shapes file: a list of [M, N, K]."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply (expected a list of [M, N, K])") from None
    if not isinstance(doc, list):
        raise UserError(f"{path}: expected a JSON list of [M, N, K], got a JSON object")  # the text began with {
    shapes = []
    for item, line in zip(doc, json_item_lines(text)):
        if not isinstance(item, list):
            raise UserError(f"{path}: line {line}: expected [M, N, K], got {json.dumps(item)[:80]} (a flat list? "
                            "write [[M, N, K], ...])")
        shapes.append(check_shape(item, f"{path}: line {line}"))
    return shapes


def shapes_of_lines(path: Path, text: str) -> list[Shape]:
    """The shapes of a text shapes file: one 'M N K' (or 'M,N,K') per line; blank lines and # comments skipped."""
    shapes = []
    for number_, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = SHAPE_LINE.fullmatch(line)
        if not match:
            raise UserError(f"{path}: line {number_}: expected three positive integers 'M N K', got {line[:80]!r}")
        shapes.append(check_shape([int(x) for x in match.groups()], f"{path}: line {number_}"))
    return shapes


def load_shapes(spec: str, seed: int, max_log2_mnk: float | None = None) -> list[Shape]:
    """The (M, N, K) of `--shapes`: g1000, llm, sampleN (a stratified N-shape G1000 sample, 1 <= N <= 1000) or a
    FILE (a JSON list of [M, N, K], or one "M N K" / "M,N,K" per line), or several of them joined by "+" (their union,
    first occurrence first); with `max_log2_mnk`, only the shapes with log2(M*N*K) below it. UserError names what is
    wrong and where."""
    parts = [spec] if Path(spec).is_file() else spec.split("+")
    shapes = list(dict.fromkeys(shape for part in parts for shape in shapes_of_spec(part, seed)))
    if max_log2_mnk is not None:
        shapes = [s for s in shapes if math.log2(s[0] * s[1] * s[2]) < max_log2_mnk]
        if not shapes:
            raise UserError(f"--shapes {spec}: none below log2(M*N*K) = {max_log2_mnk}")
    return shapes


def shapes_of_spec(spec: str, seed: int) -> list[Shape]:
    """The shapes of one named set, sample or file of `--shapes`."""
    if spec in ("g1000", "llm"):
        return shape_sets.load(spec)
    if match := re.fullmatch(r"sample(\d+)", spec):
        total = len(shape_sets.load("g1000"))
        if not 1 <= int(match[1]) <= total:
            raise UserError(f"--shapes {spec}: a sample takes 1 to {total} shapes of g1000")
        return shape_sets.load("g1000", int(match[1]), seed)
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"--shapes {spec!r}: not {SHAPES_HELP}" + (" (it is a folder)" if path.is_dir() else ""))
    text = text_of(path, "--shapes")
    shapes = shapes_of_json(path, text) if text.lstrip().startswith(("[", "{")) else shapes_of_lines(path, text)
    if not shapes:
        raise UserError(f"{path}: no shapes in it (expected one 'M N K' per line, or a JSON list of [M, N, K])")
    return shapes
