"""The LLM proposer against a real OpenAI-compatible HTTP server on loopback that returns scripted answers:
malformed JSON, good and bad points, a kernel that does not compile, a wrong kernel, and cheats. What the CPU can
decide (parse, scan, feasibility, compile) is decided here; the wrong and fp16-accumulating kernels must reach
evaluation (tests/gpu/test_search_evaluator_gpu.py judges them on a GPU)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from search.backends.local import LocalBackend
from search.candidate import COMPILE_ERROR, INFEASIBLE, MALFORMED, OK, SCAN_REJECTED, Problem
from search.compile_farm import CompileFarm
from search.eval_worker import SELFTEST_ENV
from search.llm.client import ChatClient
from search.llm.proposer import LLMProposer
from search.proposers import ProposalContext
from search_abi_kernels import CHEATS, naive_source

openai = pytest.importorskip("openai", reason="the LLM proposer's tests need the optional openai package "
                                               "(pip install openai; CI installs it)")

PROBLEM = Problem("nt", "fp16", 256, 256, 4096)
GOOD_POINT = {"family": "sm80_cute", "dtype": "fp16", "layout": "nt", "tile_m": 64, "tile_n": 64, "tile_k": 64,
              "stages": 3, "warps": 4}
BROKEN_SOURCE = naive_source("broken").replace("float acc = 0.f;", "float acc = undefined_name;")


class ScriptedChat(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: answers with the next scripted completion, recording each request body."""

    script: list[str] = []
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        content = type(self).script.pop(0)
        reply = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedChat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ScriptedChat.script, ScriptedChat.requests = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def proposer_at(url: str) -> LLMProposer:
    return LLMProposer(ChatClient(url, "scripted-model", timeout_s=10.0, max_retries=0))


def answer(points=(), kernels=()) -> str:
    doc = {"points": list(points), "kernels": [{"name": n, "source": s} for n, s in kernels]}
    return "Here you go:\n```json\n" + json.dumps(doc) + "\n```\n"


def test_malformed_answers(endpoint):
    ScriptedChat.script = ['{"points": [ {"family": ', json.dumps({"points": [{"family": "sm80_cute"}]}),
                           json.dumps({"kernels": [{"name": "no_export", "source": "int x;"}]})]
    proposer = proposer_at(endpoint)
    context = ProposalContext(arch=80, memory="seed memory text")
    (bad_json,) = proposer.propose(PROBLEM, context, 4)
    assert bad_json.status == MALFORMED and "not valid JSON" in bad_json.reason
    assert bad_json.completion.startswith('{"points"') and "M=256" in bad_json.prompt
    (bad_point,) = proposer.propose(PROBLEM, context, 4)
    assert bad_point.status == MALFORMED and "'dtype' is required" in bad_point.reason
    (no_export,) = proposer.propose(PROBLEM, context, 4)
    assert no_export.status == MALFORMED and "cudal2_kernel_no_export" in no_export.reason
    sent = ScriptedChat.requests[0]
    assert sent["model"] == "scripted-model" and "seed memory text" in sent["messages"][1]["content"]
    assert "cudal2_kernel_library" in sent["messages"][1]["content"]   # the ABI header is in the prompt


def test_points_feasibility_and_cheats(endpoint):
    infeasible = {**GOOD_POINT, "layout": "nn"}
    ScriptedChat.script = [answer([GOOD_POINT, infeasible], [(f"cheat_{label}", s) for label, s in CHEATS.items()])]
    proposals = proposer_at(endpoint).propose(PROBLEM, ProposalContext(arch=80), 10)
    assert len(proposals) == 2 + len(CHEATS)
    good, wrong_layout, *cheats = proposals
    assert good.status == "" and good.candidate.provenance == "llm:scripted-model"
    assert wrong_layout.status == INFEASIBLE and "nn" in wrong_layout.reason
    reasons = {n: p.reason for n, p in zip(CHEATS, cheats)}
    assert all(p.status == SCAN_REJECTED for p in cheats), reasons
    assert "stream or event creation" in reasons["private_stream"]
    assert "host synchronisation" in reasons["device_sync"]
    assert "cuBLAS" in reasons["cublas"]
    assert "static cache keyed by pointers" in reasons["pointer_cache"]
    assert "fp16 accumulation" in reasons["fp16_accumulate"]


def test_unreachable_endpoint_is_one_malformed_proposal():
    proposer = LLMProposer(ChatClient("http://127.0.0.1:9/v1", "m", timeout_s=2.0, max_retries=0))
    (only,) = proposer.propose(PROBLEM, ProposalContext(arch=80), 2)
    assert only.status == MALFORMED and "no answer" in only.reason and only.prompt


def test_sources_reach_compile_and_evaluation(endpoint, tmp_path, kernel_toolchain):
    ScriptedChat.script = [answer(kernels=[("broken", BROKEN_SOURCE), ("naive_wrong", naive_source("naive_wrong", "wrong")),
                                           ("naive_fp16", naive_source("naive_fp16", "fp16acc_hidden"))])]
    proposals = proposer_at(endpoint).propose(PROBLEM, ProposalContext(arch=80), 3)
    assert [p.status for p in proposals] == ["", "", ""], [p.reason for p in proposals]
    outcomes = CompileFarm(tmp_path, ["80"], jobs=2).compile([p.candidate for p in proposals])
    broken, wrong, fp16 = (outcomes[p.candidate.build_key] for p in proposals)
    assert not broken.ok and "undefined_name" in broken.log
    assert wrong.ok and fp16.ok   # both go on to the GPU evaluator, which must reject them (INCORRECT)
    backend = LocalBackend(tmp_path, arch=80, gpus=["0"], timeout_s=10.0, worker_env={SELFTEST_ENV: "1"})
    try:
        results = backend.evaluate([(p.candidate, PROBLEM) for p in proposals])
    finally:
        backend.close()
    # The self-test worker stands in for the GPU: the two compiled kernels were sent to it, the broken one was not.
    assert [r.status for r in results] == [COMPILE_ERROR, OK, OK]
