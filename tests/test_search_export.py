"""The RL export (search/export.py) and its conversion to TRL datasets (search/export_convert.py): a run whose LLM (a
real OpenAI-compatible server on loopback, scripted) is sampled twice per prompt gives groups of completions with
their rewards; prompts are stored once (their shared ~88k-character start once per export) and rebuild exactly; the
converter's rows follow from the groups. The GPU is the simulator."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from search import __main__ as cli
from search import candidate_space as space
from search.candidate import MALFORMED, Problem, Proposal
from search.export import FORMAT, lines, read
from search.export_convert import convert, main as convert_main
from search.llm.client import ChatClient
from search.llm.proposer import LLMProposer
from search.loop import RunArgs, Search
from search.proposers import ProposalContext
from search.reward import FAILURE_REWARD
from search.simulate import SimulatedBackend
from search.store import Store
from test_search_llm import ScriptedChat, answer, endpoint  # noqa: F401 (endpoint: the loopback server fixture)

PROBLEMS = [Problem("nt", "fp16", 64, 4096, 4096), Problem("nt", "fp16", 512, 512, 512),
            Problem("nt", "fp16", 2048, 1024, 256)]
POINTS = [space.point_of(space.sample(random.Random(seed), PROBLEMS[0], 90)) for seed in range(12)]


def test_a_group_samples_one_prompt_several_times(endpoint):
    ScriptedChat.script = [answer([POINTS[0]]), answer([POINTS[1]]), "not JSON"]
    proposer = LLMProposer(ChatClient(endpoint, "scripted-model", timeout_s=10.0, max_retries=0), group=3)
    proposals = proposer.propose(PROBLEMS[0], ProposalContext(arch=90), 1)
    assert len(ScriptedChat.requests) == 3
    assert ScriptedChat.requests[0]["messages"] == ScriptedChat.requests[1]["messages"] == \
        ScriptedChat.requests[2]["messages"]
    assert [p.status for p in proposals] == ["", "", MALFORMED]
    assert len({p.prompt for p in proposals}) == 1 and len({p.completion for p in proposals}) == 3
    with pytest.raises(ValueError, match="1 or more"):
        LLMProposer(proposer.client, group=0)


@pytest.fixture
def exported(endpoint, tmp_path, monkeypatch):
    """A simulated run with the scripted LLM sampled twice per prompt (answers cycle over POINTS, every fifth one
    unreadable), its store and its export file."""
    monkeypatch.setenv("CUDAL2_LLM_BASE_URL", endpoint)
    monkeypatch.setenv("CUDAL2_LLM_MODEL", "scripted-model")
    answers = (answer([p]) if i % 5 else "no JSON here" for i, p in enumerate(itertools.cycle(POINTS)))
    ScriptedChat.script = list(itertools.islice(answers, 200))
    store = Store(tmp_path / "s.db")
    Search.start(store, SimulatedBackend(), RunArgs(llm="openai", llm_group=2, budget_evals=60), PROBLEMS).run()
    out = tmp_path / "rl.jsonl"
    assert cli.main(["export", "--store", str(tmp_path / "s.db"), "--out", str(out)]) == 0
    return store, out


def test_export_holds_groups_of_rewarded_completions_and_each_prompt_once(exported):
    store, out = exported
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records == lines(store) and records[0]["type"] == "header" and records[0]["format"] == FORMAT
    kinds = [r["type"] for r in records]
    assert kinds.count("prefix") == 1      # the ABI, sources, space and rules: once for the whole export
    prompts, groups = read(out)
    stored = {(p["run_id"], p["round"], p["problem_key"]): p["prompt"] for p in store.proposals() if p["prompt"]}
    # one group per prompt; the last round's prompts may lack verdicts (the budget ran out)
    assert kinds.count("prompt") == len(prompts) == len(groups) >= len(stored) - len(PROBLEMS)
    assert len(prompts[groups[0]["prompt"]]) > 80000
    assert out.stat().st_size < 2 * len(prompts[groups[0]["prompt"]])    # not ~88k characters per completion
    verdicts = {(r["candidate_id"], r["problem_key"]): r["reward"] for r in store.evaluations()}
    sizes = []
    for group in groups:
        assert prompts[group["prompt"]] == stored[(group["run_id"], group["round"], group["problem"])]
        sizes.append(len(group["completions"]))
        for c in group["completions"]:
            assert c["reward"] == pytest.approx(sum(i["reward"] for i in c["items"]) / len(c["items"]))
            for item in c["items"]:
                expected = verdicts.get((item["candidate_id"], group["problem"]), FAILURE_REWARD.get(item["status"]))
                assert item["reward"] == expected
    assert max(sizes) == 2 and any(len({c["reward"] for c in g["completions"]}) == 2 for g in groups)
    assert any(i["status"] == MALFORMED for g in groups for c in g["completions"] for i in c["items"])
    unanswered = Proposal(None, MALFORMED, "no answer: timed out", prompt="a prompt the endpoint never answered")
    store.add_proposal(groups[0]["run_id"], 99, PROBLEMS[0], unanswered, "llm:openai")
    assert lines(store) == records   # nothing the model wrote: no training example


def test_converter_writes_trl_rows(exported, tmp_path, capsys):
    _, out = exported
    prompts, groups = read(out)
    rows = convert(out, "rewards")
    assert len(rows) == sum(len(g["completions"]) for g in groups)
    assert set(rows[0]) == {"prompt", "completion", "reward", "advantage", "group"}
    for _, members in itertools.groupby(rows, key=lambda r: r["group"]):
        members = list(members)
        assert sum(r["advantage"] for r in members) == pytest.approx(0.0, abs=1e-9)
        best = max(members, key=lambda r: r["reward"])
        assert best["advantage"] == max(r["advantage"] for r in members)
    rewards = {(r["prompt"], r["completion"]): r["reward"] for r in rows}
    pairs = convert(out, "preference", margin=0.05)
    assert pairs and all(set(p) == {"prompt", "chosen", "rejected"} for p in pairs)
    assert all(rewards[(p["prompt"], p["chosen"])] >= rewards[(p["prompt"], p["rejected"])] + 0.05 for p in pairs)
    target = tmp_path / "pairs.jsonl"
    assert convert_main([str(out), "--format", "preference", "--out", str(target)]) == 0
    assert [json.loads(line) for line in target.read_text().splitlines()] == pairs
    not_export = tmp_path / "other.jsonl"
    not_export.write_text(json.dumps({"prompt": "p", "completion": "c", "reward": 1.0}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        convert_main([str(not_export), "--format", "rewards", "--out", str(tmp_path / "x.jsonl")])
    assert exit_.value.code == 1 and f"not a {FORMAT} export" in capsys.readouterr().err
