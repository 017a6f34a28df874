"""`python -m search export`: the store's LLM prompts with their groups of rewarded completions, for RL fine-tuning of
a policy model (group-relative: every completion of a prompt against the others).

JSON lines, each an object with a "type" (format in search/README.md, "Export format"):
- "header": format name and version, what a reward is;
- "prefix": a text shared by the start of many prompts (the kernel C ABI, family sources, space and rules, about 88k
  characters), stored once: {"id", "text"};
- "prompt": {"id", "prefix", "text"}; the prompt is the prefix's text followed by this text. Stored once, before the
  first group that uses it;
- "group": one prompt's completions: {"prompt", "run_id", "round", "problem", "provenance", "completions": [{"text",
  "reward", "items": [{"candidate_id", "status", "reason", "reward", "speedup"}]}]}.
An item is a proposal of the completion that the store recorded: its evaluation's reward (search/reward.py) when the
candidate was evaluated on the problem in the run, else the fixed failure reward of its own status (malformed,
infeasible, scan-rejected). A completion's reward is the mean of its items' rewards. Items never evaluated (a run
stopped first) leave their completion out; the loop records a candidate once per problem and run, so a completion
whose every point repeats earlier ones has no item and is left out too; so is a prompt the endpoint did not answer.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from search.llm.prompts import PROBLEM_HEADING
from search.reward import FAILURE_REWARD
from search.store import Store

FORMAT = "cudal2-rl-groups"
VERSION = 1


def text_id(text: str) -> str:
    """The id of a stored text: the first 16 hex digits of its sha256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_prompt(prompt: str) -> tuple[str, str]:
    """(shared prefix, problem-specific rest) of a prompt: cut where its problem section begins (all of it is the
    rest when there is none)."""
    cut = prompt.find(PROBLEM_HEADING)
    return (prompt[:cut], prompt[cut:]) if cut >= 0 else ("", prompt)


def _item(proposal, evaluation) -> dict | None:
    """One recorded proposal as an item with its reward, or None when it has no verdict yet."""
    if evaluation is not None:
        speedup = evaluation["baseline_us"] / evaluation["us"] if evaluation["us"] else None
        return {"candidate_id": proposal["candidate_id"], "status": evaluation["status"],
                "reason": evaluation["reason"], "reward": evaluation["reward"], "speedup": speedup}
    if proposal["status"]:
        return {"candidate_id": proposal["candidate_id"], "status": proposal["status"], "reason": proposal["reason"],
                "reward": FAILURE_REWARD[proposal["status"]], "speedup": None}
    return None


def groups(store: Store) -> list[dict]:
    """The group records of every LLM prompt with at least one complete completion, in proposal order (each holds
    its prompt's full text under "prompt_text")."""
    verdicts = {(r["run_id"], r["candidate_id"], r["problem_key"]): r for r in store.evaluations()}
    by_prompt: dict[tuple, dict] = {}
    for p in store.proposals():
        if not p["prompt"] or not p["completion"]:
            continue   # not an LLM proposal, or the endpoint gave no answer (nothing the model wrote)
        key = (p["run_id"], p["round"], p["problem_key"], p["prompt"])
        group = by_prompt.setdefault(key, {"prompt_text": p["prompt"], "run_id": p["run_id"], "round": p["round"],
                                           "problem": p["problem_key"], "provenance": p["provenance"],
                                           "completions": {}})
        items = group["completions"].setdefault(p["completion"], [])
        items.append(_item(p, verdicts.get((p["run_id"], p["candidate_id"], p["problem_key"]))))
    out = []
    for group in by_prompt.values():
        completions = [{"text": text, "reward": sum(i["reward"] for i in items) / len(items), "items": items}
                       for text, items in group["completions"].items() if None not in items]
        if completions:
            out.append({**group, "completions": completions})
    return out


def lines(store: Store) -> list[dict]:
    """Every record of the export in file order: the header, then each group preceded by the prefix and prompt
    records it is the first to use."""
    out: list[dict] = [{"type": "header", "format": FORMAT, "version": VERSION,
                        "reward": "mean over the completion's items of search/reward.py's reward"}]
    prefixes: set[str] = set()
    prompts: set[str] = set()
    for group in groups(store):
        prefix, rest = split_prompt(group.pop("prompt_text"))
        prefix_id, prompt_id = text_id(prefix), text_id(prefix + rest)
        if prefix_id not in prefixes:
            out.append({"type": "prefix", "id": prefix_id, "text": prefix})
            prefixes.add(prefix_id)
        if prompt_id not in prompts:
            out.append({"type": "prompt", "id": prompt_id, "prefix": prefix_id, "text": rest})
            prompts.add(prompt_id)
        out.append({"type": "group", "prompt": prompt_id, **group})
    return out


def read(path: Path) -> tuple[dict[str, str], list[dict]]:
    """(prompt id -> full prompt text, group records) of an export file; ValueError naming what is wrong."""
    texts: dict[str, str] = {}
    prompts: dict[str, str] = {}
    out = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            record = json.loads(line)
            kind = record.get("type")
            if number == 1 and (kind != "header" or record.get("format") != FORMAT):
                raise ValueError(f"{path}: not a {FORMAT} export (its first line is no {FORMAT} header)")
            if kind == "header" and record["version"] != VERSION:
                raise ValueError(f"{path}: {FORMAT} version {record['version']}; this reader takes {VERSION}")
            if kind == "prefix":
                texts[record["id"]] = record["text"]
            elif kind == "prompt":
                prompts[record["id"]] = texts[record["prefix"]] + record["text"]
            elif kind == "group":
                if record["prompt"] not in prompts:
                    raise ValueError(f"{path}:{number}: group of prompt {record['prompt']} before its prompt record")
                out.append(record)
    return prompts, out


def export(store: Store, out: Path) -> int:
    """Writes the export to `out` (JSON lines); returns how many completions it holds."""
    records = lines(store)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return sum(len(r["completions"]) for r in records if r["type"] == "group")
