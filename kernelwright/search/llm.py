"""The LLM proposer: any OpenAI-compatible chat endpoint (a local llama.cpp ``llama-server``, vLLM, ...) writes
candidates, prompted with the reference, the archive's nearest verified kernels and the feedback of its own
earlier attempts (the compile log, the mismatch report, the timing).

Configuration: ``--llm-url`` / ``$KW_LLM_URL`` (``http://127.0.0.1:8080``, ``.../v1`` or the full
``.../v1/chat/completions``), ``--llm-model`` / ``$KW_LLM_MODEL`` (default: the first model the server lists) and
``--llm-key`` / ``$KW_LLM_KEY`` (sent as a bearer token). :meth:`LLMClient.check` asks ``GET /v1/models`` with a
short timeout before any work starts, so an unreachable endpoint is a clear error naming the URL. Plain urllib:
no client library.
"""

from __future__ import annotations

import ast
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from kernelwright.errors import UsageError
from kernelwright.search.state import Evaluated, Proposal, SearchState


class LLMError(UsageError):
    """The endpoint cannot be used: unreachable, rejecting the key, or answering something that is not a chat
    completion."""


def base_url(url: str) -> str:
    """``http://host:port[/prefix]/v1`` from any of the accepted spellings."""
    u = url.strip().rstrip("/")
    if not re.match(r"^https?://", u):
        raise LLMError(f"--llm-url: expected http://HOST:PORT[/v1], got {url!r}")
    for tail in ("/chat/completions", "/completions"):
        if u.endswith(tail):
            u = u[: -len(tail)]
    return u if u.endswith("/v1") else u + "/v1"


@dataclass
class LLMClient:
    url: str
    model: str | None = None
    key: str | None = None
    timeout_s: float = 600.0
    temperature: float = 0.7
    max_tokens: int = 8192
    models: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, url: str | None = None, model: str | None = None, key: str | None = None,
                 **kw) -> LLMClient | None:
        """Flags first, then ``KW_LLM_URL`` / ``KW_LLM_MODEL`` / ``KW_LLM_KEY``; None when no URL is given."""
        url = url or os.environ.get("KW_LLM_URL")
        if not url:
            return None
        return cls(url, model or os.environ.get("KW_LLM_MODEL") or None, key or os.environ.get("KW_LLM_KEY") or None,
                   **kw)

    @property
    def base(self) -> str:
        return base_url(self.url)

    def _request(self, method: str, path: str, body: dict | None, timeout: float) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        try:
            return json.loads(raw.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            raise LLMError(f"LLM endpoint {self.base}{path} answered something that is not JSON: "
                           f"{raw[:200]!r}") from None

    def check(self, timeout_s: float = 5.0) -> str | None:
        """Is the endpoint there? ``GET /v1/models`` within ``timeout_s``; picks the first listed model when none
        was named. Raises :class:`LLMError` naming the URL when nothing answers or the key is refused."""
        try:
            listing = self._request("GET", "/models", None, timeout_s)
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                raise LLMError(f"LLM endpoint {self.base} refused the key (HTTP {e.code}); set --llm-key or "
                               "KW_LLM_KEY") from None
            listing = {}  # answering at all is enough: some servers have no /models
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise LLMError(f"LLM endpoint {self.base} is unreachable ({reason}); start the server (llama.cpp "
                           "`llama-server`, `vllm serve`, ...) or fix --llm-url / KW_LLM_URL") from None
        self.models = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict) and m.get("id")]
        if self.model is None:
            self.model = self.models[0] if self.models else "default"
        return self.model

    def chat(self, messages: list[dict]) -> str:
        """One chat completion; the reply's text. Raises :class:`LLMError` on any failure."""
        body = {"model": self.model or "default", "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        try:
            reply = self._request("POST", "/chat/completions", body, self.timeout_s)
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace") if hasattr(e, "read") else ""
            raise LLMError(f"LLM endpoint {self.base} answered HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            raise LLMError(f"LLM endpoint {self.base}: {getattr(e, 'reason', None) or e}") from None
        try:
            return reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"LLM endpoint {self.base} answered without choices[0].message.content: "
                           f"{str(reply)[:200]}") from None


# --- reading replies ----------------------------------------------------------------------------------------------
_BLOCK = re.compile(r"```[ \t]*(?:python|py|Python|python3)?[ \t]*\n(.*?)```", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)


def extract_code(reply: str) -> str | None:
    """The candidate in a reply: the longest fenced code block defining ``ModelNew`` (a reasoning model's
    ``<think>`` section ignored), or the whole reply when it is bare Python defining ``ModelNew``; else None."""
    text = _THINK.sub("", reply or "")
    blocks = [b for b in _BLOCK.findall(text) if "ModelNew" in b]
    if blocks:
        return max(blocks, key=len).strip("\n") + "\n"
    if "class ModelNew" in text:
        try:
            ast.parse(text)
            return text.strip("\n") + "\n"
        except SyntaxError:
            return None
    return None


# --- prompts ------------------------------------------------------------------------------------------------------
SYSTEM = """You are an expert GPU kernel engineer. You make PyTorch models faster with custom kernels (Triton, \
CUDA C through torch.utils.cpp_extension.load_inline, or the kernelwright library) while keeping their results.

Reply with ONE ```python code block holding a complete, self-contained Python file that defines
`class ModelNew(torch.nn.Module)`. Rules:
- ModelNew.__init__ takes exactly the arguments of the reference Model.__init__; name parameters and buffers as
  the reference does (its weights are loaded into ModelNew by name).
- ModelNew.forward takes the reference forward's inputs and returns the same outputs (shapes, dtypes, values
  within floating-point tolerance) for ANY inputs of that kind: it is checked on fresh random inputs, heavy-tailed
  and magnified ones, and at a second problem size.
- No caching of outputs across calls, no side streams or background threads, no changing torch's precision
  settings (TF32), no printing. Inputs must not be modified in place.
- You may import torch, triton, triton.language, and kernelwright. kernelwright offers tested ops (pick a rung
  with variant="...", or variant=None for its own choice):
{ops}"""


def _ops_text() -> str:
    try:
        from kernelwright.registry import get_family
    except Exception:  # pragma: no cover
        return ""
    sigs = {
        "matmul": "kernelwright.ops.matmul(a [M,K], b [K,N], *, variant) -> [M,N] (2-D only, fp32 accumulation)",
        "softmax": "kernelwright.ops.softmax(x, dim=-1, *, variant)",
        "rms_norm": "kernelwright.ops.rms_norm(x [...,D], weight [D], eps, *, variant)",
        "layer_norm": "kernelwright.ops.layer_norm(x [...,D], weight [D], bias [D], eps, *, variant)",
        "add_rms_norm": "kernelwright.ops.add_rms_norm(x, residual, weight, eps, *, variant) -> (y, x + residual)",
        "swiglu": "kernelwright.ops.swiglu(gate, up, *, variant) -> silu(gate) * up",
        "rope": "kernelwright.ops.rope(q [...,H,S,D], k [...,KH,S,D], cos [S,D], sin [S,D], *, variant) -> (q', k') "
                "(half-split, Hugging Face layout)",
        "cross_entropy": "kernelwright.ops.cross_entropy(logits [N,V], target [N], ignore_index=-100, "
                         "label_smoothing=0.0, reduction='mean', *, variant) -> float32 loss (reads bf16 logits "
                         "directly)",
        "attention": "kernelwright.ops.attention(q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v, *, causal=False, scale=None, "
                     "variant) (causal mask aligned bottom-right; GQA when Hq is a multiple of Hkv)",
        "vector_add": "kernelwright.ops.vector_add(x, y, *, variant)",
        "activation": "kernelwright.ops.activation(x, kind, *, variant) (kind: 'silu', 'gelu', 'gelu_tanh', 'relu')",
    }
    lines = []
    for fam, sig in sigs.items():
        try:
            rungs = ", ".join(r.name for r in get_family(fam).rungs)
        except Exception:
            continue
        lines.append(f"  - {sig}; rungs: {rungs}")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n# ... (cut) ...\n" + text[-limit // 2:]


def feedback_text(verdict: dict) -> str:
    """What an attempt's verdict says, for the next prompt: status, reason, log (traceback), mismatch report,
    timing."""
    lines = []
    cat, reason = verdict.get("category"), verdict.get("reason")
    if verdict.get("passed"):
        lines.append(f"PASSED: correct, {verdict.get('speedup_eager') or 0:.3f}x vs eager PyTorch"
                     + (f", {verdict['speedup_compile']:.3f}x vs torch.compile" if verdict.get("speedup_compile")
                        else ""))
    else:
        stage = ("did not load" if not verdict.get("loaded") else "did not compile/run" if not verdict.get("compiled")
                 else "wrong results" if not verdict.get("correct") else "rejected")
        lines.append(f"FAILED ({stage}) [{cat}]: {reason}")
    details = verdict.get("details") or {}
    tb = details.get("traceback")
    if tb:
        lines.append("log:\n```\n" + _clip(str(tb).strip(), 1800) + "\n```")
    bad = [c for c in verdict.get("checks") or [] if not c.get("ok")]
    if bad:
        lines.append("mismatch report:")
        for c in bad[:4]:
            where = f"input set {c.get('name')} ({c.get('dist')}{', second problem size' if c.get('alt') else ''})"
            lines.append(f"- {where}: {c.get('reason')}; relative error {c.get('rel_err', 0):.3g} (eager PyTorch's "
                         f"own {c.get('eager_rel_err', 0):.3g}), max abs error {c.get('max_abs', 0):.3g}")
    times = verdict.get("times") or {}

    def ms(key):
        t = times.get(key)
        return f"{t['median_ms']:.4f} ms" if isinstance(t, dict) and t.get("median_ms") is not None else "-"

    if times.get("candidate"):
        lines.append(f"timing: candidate {ms('candidate')}, eager {ms('eager')}, torch.compile {ms('compile')}")
    return "\n".join(lines)


class LLMProposer:
    """Asks the endpoint for one candidate per attempt.

    Parameters
    ----------
    client : a checked :class:`LLMClient`
    reference : the problem file
    archive : an :class:`~kernelwright.eval.archive.Archive` for the nearest verified kernels (``similar``)
    similar : how many archived kernels go in the prompt
    history : how many of this proposer's latest attempts (with feedback) go in the prompt
    """

    name = "llm"

    def __init__(self, client: LLMClient, reference: str, *, archive=None, similar: int = 3, history: int = 4,
                 code_chars: int = 6000):
        from pathlib import Path

        self.client, self.archive = client, archive
        self.reference = str(reference)
        self.source = Path(reference).read_text()
        self.similar, self.history, self.code_chars = similar, history, code_chars
        self.attempts: list[dict] = []
        """per attempt: ``n``, ``label``, ``digest``, ``feedback`` (None while being judged)"""
        self.prompts: list[list[dict]] = []

    def _similar_text(self) -> str:
        if self.archive is None or self.similar <= 0:
            return ""
        try:
            matches = self.archive.similar(self.source, k=self.similar)
        except Exception:
            return ""
        parts = []
        for m in matches:
            best = m.best
            sp = f"{best.speedup_eager:.2f}x vs eager" if best.speedup_eager else "verified"
            parts.append(f"### {m.problem_name or m.problem_hash[:12]} (similarity {m.score:.2f}, {sp})\n"
                         f"```python\n{_clip(best.code.strip(), self.code_chars)}\n```")
        return "\n\n".join(parts)

    def prompt(self, state: SearchState) -> list[dict]:
        name = os.path.basename(self.reference)
        user = [f"## Reference problem ({name})\n```python\n{self.source.strip()}\n```"]
        sim = self._similar_text()
        if sim:
            user.append("## Verified kernels from the archive for the most similar problems\n" + sim)
        best = state.best
        if best is not None:
            user.append(f"## Best verified candidate so far ({best.fitness:.3f}x vs eager, from the "
                        f"{best.proposal.origin} proposer)\n```python\n"
                        f"{_clip(best.proposal.source.strip(), self.code_chars)}\n```")
        mine = self.attempts[-self.history:]
        if mine:
            fb = [f"### attempt {a['n']}\n" + (a["feedback"] or "(still being judged)") for a in mine]
            user.append("## Your previous attempts and what the evaluator said (oldest first)\n" + "\n\n".join(fb))
        user.append("## Task\nWrite ModelNew: faster than the reference and than the best candidate so far, with the "
                    "same results. Fix what the feedback reports. Reply with one ```python block.")
        return [{"role": "system", "content": SYSTEM.format(ops=_ops_text())},
                {"role": "user", "content": "\n\n".join(user)}]

    def propose(self, state: SearchState) -> Proposal:
        n = len(self.attempts) + 1
        messages = self.prompt(state)
        self.prompts.append(messages)
        label = f"llm attempt {n}"
        entry = {"n": n, "label": label, "digest": None, "feedback": None}
        self.attempts.append(entry)
        try:
            reply = self.client.chat(messages)
        except LLMError as e:
            return Proposal(None, label, self.name, note=f"the request failed: {e}")
        code = extract_code(reply)
        if code is None:
            return Proposal(None, label, self.name, reply=reply,
                            note="the reply had no ```python code block defining class ModelNew")
        prop = Proposal(code, label, self.name, reply=reply)
        entry["digest"] = prop.digest
        return prop

    def noted(self, proposal: Proposal, note: str) -> None:
        """An attempt that produced nothing to judge: its note is its feedback."""
        for a in reversed(self.attempts):
            if a["label"] == proposal.label:
                a["feedback"] = f"NOT JUDGED: {note}"
                return

    def feedback(self, evaluated: Evaluated) -> None:
        for a in reversed(self.attempts):
            if a["label"] == evaluated.proposal.label:
                a["feedback"] = feedback_text(evaluated.verdict)
                return
