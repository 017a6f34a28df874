"""The LLM proposer (any OpenAI-compatible endpoint, through a standard-library client): prompts, answer parsing,
static scan of kernel sources, and the contextual memory file."""
from search.llm.proposer import LLMProposer

__all__ = ["LLMProposer"]
