"""The LLM proposer (optional extra `llm`: the openai package): prompts, answer parsing, static scan of kernel
sources, and the contextual memory file."""
from search.llm.proposer import LLMProposer

__all__ = ["LLMProposer"]
