"""`python -m search.export_convert`: an RL export (`python -m search export`) as a dataset in TRL's standard formats.

    python -m search.export_convert rl.jsonl --format rewards --out rewards.jsonl
    python -m search.export_convert rl.jsonl --format preference --margin 0.05 --out pairs.jsonl

- rewards: one line per completion, {"prompt", "completion", "reward", "advantage", "group"}: TRL's prompt-completion
  type with the reward and the group-relative advantage (reward minus its group's mean, over the group's standard
  deviation; 0 in a group of one), for an offline group-relative trainer (GRPO's advantage) or reward-weighted SFT;
- preference: TRL's preference type (DPOTrainer), {"prompt", "chosen", "rejected"}: within each group, the
  best-rewarded completion against every completion rewarded at least `margin` less.
Prompts are plain text (TRL's standard format): the system message, a blank line, the user message.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from search.export import read

FORMATS = ("rewards", "preference")


def rewards(prompts: dict[str, str], groups: list[dict]) -> list[dict]:
    """One prompt-completion row per completion with its reward and group-relative advantage."""
    out = []
    for index, group in enumerate(groups):
        values = [c["reward"] for c in group["completions"]]
        mean = statistics.fmean(values)
        spread = statistics.pstdev(values)
        for c in group["completions"]:
            advantage = (c["reward"] - mean) / spread if spread > 0 else 0.0
            out.append({"prompt": prompts[group["prompt"]], "completion": c["text"], "reward": c["reward"],
                        "advantage": advantage, "group": index})
    return out


def preference(prompts: dict[str, str], groups: list[dict], margin: float) -> list[dict]:
    """Per group, (best completion, each completion rewarded at least `margin` less) as preference rows."""
    out = []
    for group in groups:
        ranked = sorted(group["completions"], key=lambda c: -c["reward"])
        best = ranked[0]
        out += [{"prompt": prompts[group["prompt"]], "chosen": best["text"], "rejected": c["text"]}
                for c in ranked[1:] if c["reward"] <= best["reward"] - margin]
    return out


def convert(source: Path, kind: str, margin: float = 0.05) -> list[dict]:
    """The rows of `kind` (FORMATS) for the export file `source`."""
    if kind not in FORMATS:
        raise ValueError(f"unknown dataset format {kind!r}; supported: {', '.join(FORMATS)}")
    prompts, groups = read(source)
    return rewards(prompts, groups) if kind == "rewards" else preference(prompts, groups, margin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.export_convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path, help="a `python -m search export` file")
    parser.add_argument("--format", choices=FORMATS, required=True)
    parser.add_argument("--margin", type=float, default=0.05, help="preference: least reward gap of a pair")
    parser.add_argument("--out", type=Path, required=True, help="the dataset (JSON lines)")
    args = parser.parse_args(argv)
    try:
        rows = convert(args.export, args.format, args.margin)
    except (OSError, ValueError, KeyError) as exc:
        parser.exit(1, f"{parser.prog}: {args.export}: {type(exc).__name__}: {exc}\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{args.out}: {len(rows)} {args.format} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
