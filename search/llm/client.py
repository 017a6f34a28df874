"""A chat client for any OpenAI-compatible endpoint (POST <base>/chat/completions), on the standard library.

Configured from CUDAL2_LLM_BASE_URL, CUDAL2_LLM_MODEL and CUDAL2_LLM_API_KEY. Every request has a timeout and a
bounded number of retries (connection failures, HTTP 429 and 5xx), and every answer is checked before its text is
used: a 2xx JSON object whose first choice has a message whose content is a string of at most MAX_ANSWER_CHARS. An
HTTP error, a timeout, an HTML page, a list, number or object where the text should be, or a choice without a message
is an LLMError that says what came back (its kind and size, never its text), so a misbehaving endpoint costs the
proposals it was asked for, not the run.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from search.errors import UserError

ENV_VARS = ("CUDAL2_LLM_BASE_URL", "CUDAL2_LLM_MODEL", "CUDAL2_LLM_API_KEY")
MAX_ANSWER_CHARS = 200_000                     # a longer answer is refused (no kernel source needs more)
MAX_BODY_BYTES = 4 * MAX_ANSWER_CHARS + 65536  # the response body read at most (JSON escapes included)
RETRY_STATUS = (429, 500, 502, 503, 504)


class LLMError(RuntimeError):
    """The endpoint could not be reached, answered with an error (after the retries), or answered with something
    that is not a chat completion with text."""


def json_kind(value: object) -> str:
    """The JSON name of a decoded value's type (for messages that describe an answer without quoting it)."""
    kinds = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def completion_text(body: bytes, content_type: str) -> str:
    """The first choice's message text of a chat-completion response body; LLMError saying what is wrong."""
    if len(body) > MAX_BODY_BYTES:
        raise LLMError(f"the answer's body is over {MAX_BODY_BYTES} bytes")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise LLMError(f"the answer is not JSON ({content_type}, {len(body)} bytes)") from None
    if not isinstance(doc, dict):
        raise LLMError(f"the answer is a JSON {json_kind(doc)}, not a chat completion object")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices:
        raise LLMError("the answer has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise LLMError("the answer's first choice has no message")
    content = message.get("content")
    if not isinstance(content, str):
        raise LLMError(f"the answer's message content is a JSON {json_kind(content)}, not text")
    if len(content) > MAX_ANSWER_CHARS:
        raise LLMError(f"the answer's text has {len(content)} characters, over the {MAX_ANSWER_CHARS} accepted")
    return content


@dataclasses.dataclass
class ChatClient:
    """Chat completions from `model` at `base_url` (e.g. http://127.0.0.1:8000/v1); `max_retries` more attempts
    after a connection failure, a timeout or HTTP 429/5xx, waiting `retry_wait_s` doubled each time."""

    base_url: str
    model: str
    api_key: str = "none"
    timeout_s: float = 300.0
    max_retries: int = 2
    temperature: float = 0.7
    retry_wait_s: float = 1.0

    @classmethod
    def from_env(cls) -> "ChatClient":
        """The client the environment names; UserError naming the variables that are missing or wrong."""
        missing = [v for v in ENV_VARS[:2] if not os.environ.get(v)]
        if missing:
            raise UserError(f"--llm openai needs {' and '.join(missing)} (an OpenAI-compatible endpoint, e.g. "
                            "http://127.0.0.1:8000/v1, and a model name; CUDAL2_LLM_API_KEY if it wants a key)")
        base_url = os.environ["CUDAL2_LLM_BASE_URL"]
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UserError(f"CUDAL2_LLM_BASE_URL={base_url!r} is not an http:// or https:// URL")
        return cls(base_url, os.environ["CUDAL2_LLM_MODEL"], os.environ.get("CUDAL2_LLM_API_KEY") or "none")

    def complete(self, system: str, user: str) -> str:
        """The assistant's text for one system + user exchange. Raises LLMError on any endpoint failure."""
        body = json.dumps({"model": self.model, "temperature": self.temperature,
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": user}]}).encode()
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/chat/completions", data=body, method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
        failure = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_wait_s * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    answer = response.read(MAX_BODY_BYTES + 1)
                    content_type = response.headers.get_content_type()
            except urllib.error.HTTPError as exc:
                failure = f"HTTP {exc.code} {exc.reason}"
                if exc.code not in RETRY_STATUS:
                    break
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                failure = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            try:
                return completion_text(answer, content_type)
            except LLMError as exc:
                raise LLMError(f"{self.base_url} ({self.model}): {exc}") from None
        tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
        raise LLMError(f"{self.base_url} ({self.model}): {failure} ({tries})")
