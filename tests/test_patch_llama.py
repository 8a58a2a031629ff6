"""kernelwright.patch on a real client: a Hugging Face Llama built from a small config with random weights (no
download). Logits and one training step's gradients must match the unpatched model."""

import copy

import pytest
import torch

import kernelwright

transformers = pytest.importorskip("transformers", reason="the patched-Llama test needs transformers")


def _llama(dtype, device):
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-6, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)
    with torch.no_grad():  # the default init leaves every norm weight at 1: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _step(model, ids):
    out = model(ids, labels=ids)
    out.loss.backward()
    return out.logits.detach().float(), {n: p.grad.detach().float() for n, p in model.named_parameters()}


def _rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize(("dtype", "bound"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_patched_llama_matches_logits_and_gradients(dtype, bound, device):
    ref_model = _llama(dtype, device)
    our_model = copy.deepcopy(ref_model)
    ids = torch.randint(0, 96, (2, 24), device=device, generator=torch.Generator(device).manual_seed(1))
    ref_logits, ref_grads = _step(ref_model, ids)  # before patching: the rope swap is module-wide
    patched = kernelwright.patch(our_model)
    try:
        assert (patched.norms, patched.mlps) == (5, 2)  # 2 per layer + the final norm; one MLP per layer
        assert patched.rope_modules == ["transformers.models.llama.modeling_llama"]
        logits, grads = _step(our_model, ids)
    finally:
        patched.undo()
    assert _rel(logits, ref_logits) <= bound
    assert grads.keys() == ref_grads.keys()
    worst = max(grads, key=lambda n: _rel(grads[n], ref_grads[n]))
    assert _rel(grads[worst], ref_grads[worst]) <= 5 * bound, worst


def test_undo_restores_the_model(device):
    from transformers.models.llama import modeling_llama

    model = _llama(torch.float32, device)
    original_rope = modeling_llama.apply_rotary_pos_emb
    patched = kernelwright.patch(model)
    assert modeling_llama.apply_rotary_pos_emb is not original_rope
    assert all("forward" in vars(m) for m in model.modules() if type(m).__name__ == "LlamaRMSNorm")
    patched.undo()
    assert modeling_llama.apply_rotary_pos_emb is original_rope
    assert not any("forward" in vars(m) for m in model.modules())


def test_patch_rejects_what_is_not_a_model():
    with pytest.raises(kernelwright.UsageError, match="model: expected a torch.nn.Module"):
        kernelwright.patch("llama")
