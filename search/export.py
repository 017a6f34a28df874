"""`python -m search export`: (prompt, completion, reward) JSON lines for RL fine-tuning of a policy model.

One record per proposal that carries an LLM prompt: {"prompt", "completion", "reward", "status", "reason",
"problem", "provenance", "run_id", "candidate_id", "speedup"}. `reward` is the evaluation's (search/reward.py) when
the candidate was evaluated on the proposal's problem, else the fixed failure reward of the proposal's own status
(malformed, infeasible, scan-rejected); proposals never evaluated (a run stopped first) are left out.
"""
from __future__ import annotations

import json
from pathlib import Path

from search.reward import FAILURE_REWARD
from search.store import Store


def records(store: Store) -> list[dict]:
    """The export records of every LLM proposal with a verdict, in proposal order."""
    verdicts = {(r["run_id"], r["candidate_id"], r["problem_key"]): r for r in store.evaluations()}
    out = []
    for p in store.proposals():
        if not p["prompt"]:
            continue
        evaluation = verdicts.get((p["run_id"], p["candidate_id"], p["problem_key"]))
        if evaluation is not None:
            reward, status, reason = evaluation["reward"], evaluation["status"], evaluation["reason"]
            speedup = evaluation["baseline_us"] / evaluation["us"] if evaluation["us"] else None
        elif p["status"]:
            reward, status, reason, speedup = FAILURE_REWARD[p["status"]], p["status"], p["reason"], None
        else:
            continue
        out.append({"prompt": p["prompt"], "completion": p["completion"], "reward": reward, "status": status,
                    "reason": reason, "problem": p["problem_key"], "provenance": p["provenance"],
                    "run_id": p["run_id"], "candidate_id": p["candidate_id"], "speedup": speedup})
    return out


def export(store: Store, out: Path) -> int:
    """Writes the records to `out` (JSON lines); returns how many."""
    rows = records(store)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return len(rows)
