"""Drop-in ``torch.nn`` modules backed by kernelwright's ops (forward and backward in Triton kernels)."""
from kernelwright.nn.activations import SiluAndMul, silu_and_mul  # noqa: F401
from kernelwright.nn.norms import LayerNorm, RMSNorm  # noqa: F401
from kernelwright.nn.rope import RotaryEmbedding, apply_rotary_pos_emb  # noqa: F401
