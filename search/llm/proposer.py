"""The LLM proposer: asks an OpenAI-compatible model for points or kernel sources and vets every answer.

Each item of the answer becomes a Proposal; what fails a step keeps its status and reason (MALFORMED: unreadable
answer, bad point, missing export; SCAN_REJECTED: a banned construct; INFEASIBLE: the family's feasibility check).
The rest goes on, like any candidate, to compile, correctness and timing. Every proposal carries the prompt and the
completion (training data for RL fine-tuning); with `group` > 1 the same prompt is sampled that many times, so the
export holds groups of completions per prompt with their rewards (group-relative RL).
"""
from __future__ import annotations

import dataclasses

from search.candidate import INFEASIBLE, MALFORMED, Problem, Proposal
from search.errors import UserError
from search.llm import prompts
from search.llm.answers import parse_answer
from search.llm.client import ChatClient, LLMError
from search.proposers import ProposalContext
from search.candidate_space import check


@dataclasses.dataclass
class LLMProposer:
    """Proposals from `client`'s model (provenance "llm:<model>"), from `group` completions of each prompt."""

    client: ChatClient
    group: int = 1

    def __post_init__(self) -> None:
        if self.group < 1:
            raise UserError(f"the LLM's group of completions per prompt is {self.group}; it takes 1 or more")

    @classmethod
    def from_env(cls, name: str = "openai", group: int = 1) -> "LLMProposer":
        """The proposer for `--llm NAME` (only "openai": any OpenAI-compatible endpoint, see ChatClient.from_env)."""
        if name != "openai":
            raise UserError(f"unknown LLM proposer {name!r}; supported: openai (any OpenAI-compatible endpoint)")
        return cls(ChatClient.from_env(), group)

    @property
    def provenance(self) -> str:
        return f"llm:{self.client.model}"

    def propose(self, problem: Problem, context: ProposalContext, n: int) -> list[Proposal]:
        """Up to `n` vetted proposals from each of `group` completions of one prompt (an endpoint failure is one
        MALFORMED proposal saying why)."""
        system, user = prompts.build(problem, context, n)
        prompt = f"{system}\n\n{user}"
        return [p for _ in range(self.group) for p in self._completion(system, user, prompt, problem, context, n)]

    def _completion(self, system: str, user: str, prompt: str, problem: Problem, context: ProposalContext,
                    n: int) -> list[Proposal]:
        """The vetted proposals of one completion."""
        try:
            completion = self.client.complete(system, user)
        except LLMError as exc:
            return [Proposal(None, MALFORMED, f"no answer: {exc}", prompt=prompt)]
        proposals = parse_answer(completion, self.provenance)[:n]
        for proposal in proposals:
            proposal.prompt, proposal.completion = prompt, completion
            if proposal.status or proposal.candidate is None:
                continue
            if proposal.candidate.id in context.seen:
                proposal.status, proposal.reason = INFEASIBLE, "already tried on this problem"
                continue
            ok, why = check(proposal.candidate, problem, context.arch)
            if not ok:
                proposal.status, proposal.reason = INFEASIBLE, why
        return proposals
