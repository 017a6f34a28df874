"""A chat client for any OpenAI-compatible endpoint (the optional `openai` package, imported on first use).

Configured from CUDAL2_LLM_BASE_URL, CUDAL2_LLM_MODEL and CUDAL2_LLM_API_KEY; every request has a timeout and a
bounded number of retries, so an unreachable endpoint costs a round at most, not the run.
"""
from __future__ import annotations

import dataclasses
import os

ENV_VARS = ("CUDAL2_LLM_BASE_URL", "CUDAL2_LLM_MODEL", "CUDAL2_LLM_API_KEY")


class LLMError(RuntimeError):
    """The endpoint could not be reached or answered with an error (after the retries)."""


@dataclasses.dataclass
class ChatClient:
    """Chat completions from `model` at `base_url` (e.g. http://127.0.0.1:8000/v1)."""

    base_url: str
    model: str
    api_key: str = "none"
    timeout_s: float = 300.0
    max_retries: int = 2
    temperature: float = 0.7

    @classmethod
    def from_env(cls) -> "ChatClient":
        """The client the environment names; raises ValueError listing the variables that are missing."""
        missing = [v for v in ENV_VARS[:2] if not os.environ.get(v)]
        if missing:
            raise ValueError(f"the LLM proposer needs {', '.join(missing)} (an OpenAI-compatible endpoint and model; "
                             f"CUDAL2_LLM_API_KEY if the endpoint wants one)")
        return cls(os.environ["CUDAL2_LLM_BASE_URL"], os.environ["CUDAL2_LLM_MODEL"],
                   os.environ.get("CUDAL2_LLM_API_KEY") or "none")

    def complete(self, system: str, user: str) -> str:
        """The assistant's text for one system + user exchange. Raises LLMError on any endpoint failure."""
        try:
            import openai  # noqa: PLC0415 (optional extra: pip install cudal2[llm])
        except ImportError as exc:
            raise LLMError("the LLM proposer needs the openai package: pip install openai") from exc
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s,
                               max_retries=self.max_retries)
        try:
            reply = client.chat.completions.create(
                model=self.model, temperature=self.temperature,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        except openai.OpenAIError as exc:
            raise LLMError(f"{self.base_url} ({self.model}): {type(exc).__name__}: {exc}") from exc
        if not reply.choices or reply.choices[0].message.content is None:
            raise LLMError(f"{self.base_url} ({self.model}) returned no message")
        return reply.choices[0].message.content
