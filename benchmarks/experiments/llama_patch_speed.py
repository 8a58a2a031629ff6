"""Forward+backward tokens/s of a Hugging Face Llama (random weights, no download), unpatched vs
``kernelwright.patch``ed, bf16, in one process. GPU only:

    KW_DEVICE=cuda python benchmarks/experiments/llama_patch_speed.py   # JSON to $OUT/llama_patch.json

The model is built from a config (default: 8 layers of a Llama-3-8B-shaped block, hidden 4096, intermediate
14336, 32 heads, 8 KV heads), so the memory-bound ops' share is realistic; batch x sequence tokens per step.
Logits of the two models are compared first (relative norm error), then each is timed with the core timer
(CUDA events, blocking kernel, L2 flushed) on a full training step (forward, loss, backward); the unpatched model is
timed again after the patched one, so drift between the first and last timing shows.
"""

import copy
import json
import os

import torch

import kernelwright
from kernelwright.harness.timing import TimerConfig, time_fn

assert kernelwright.runtime.current_device() == "cuda"
import transformers  # noqa: E402

layers = int(os.environ.get("LAYERS", "8"))
batch, seq = int(os.environ.get("BATCH", "4")), int(os.environ.get("SEQ", "2048"))
cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                               num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                               max_position_embeddings=seq, rms_norm_eps=1e-5, attn_implementation="sdpa")
torch.manual_seed(0)
base = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")


def step(model):
    model.zero_grad(set_to_none=True)
    model(ids, labels=ids).loss.backward()


with torch.no_grad():
    ref_logits = base(ids).logits.float()
ref_t = time_fn(lambda: step(base), TimerConfig(max_seconds=10, graph="off"))
ours = copy.deepcopy(base)
patched = kernelwright.patch(ours)
with torch.no_grad():
    logits = ours(ids).logits.float()
rel = float(torch.linalg.vector_norm(logits - ref_logits) / torch.linalg.vector_norm(ref_logits))
our_t = time_fn(lambda: step(ours), TimerConfig(max_seconds=10, graph="off"))
# the unpatched model once more, after: a drift between its two timings (clocks, power cap) bounds how much of the
# ratio the order of the runs can explain
ref_again = time_fn(lambda: step(base), TimerConfig(max_seconds=10, graph="off"))
tokens = batch * seq
result = {"config": {"layers": layers, "batch": batch, "seq": seq}, "patched": str(patched),
          "logits_rel_err": rel, "unpatched_ms": ref_t.median_ms,
          "unpatched_again_ms": ref_again.median_ms, "patched_ms": our_t.median_ms,
          "unpatched_tok_s": tokens / (ref_t.median_ms * 1e-3), "patched_tok_s": tokens / (our_t.median_ms * 1e-3),
          "speedup": ref_t.median_ms / our_t.median_ms,
          "telemetry": [ref_t.telemetry, our_t.telemetry, ref_again.telemetry]}
print(json.dumps(result, indent=1, default=str))
with open(os.path.join(os.environ.get("OUT", "/tmp"), "llama_patch.json"), "w") as fh:
    json.dump(result, fh, indent=1, default=str)
