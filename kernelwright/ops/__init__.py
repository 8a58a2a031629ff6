"""Public ops, one per family. Each validates its inputs, then runs the rung asked for (``variant=``) or the
best rung for the device and shape. Kernels are compiled on first use."""

from kernelwright.ops.activation.api import activation
from kernelwright.ops.add_rms_norm.api import add_rms_norm
from kernelwright.ops.attention.api import attention, attention_varlen
from kernelwright.ops.cross_entropy.api import cross_entropy
from kernelwright.ops.layer_norm.api import layer_norm
from kernelwright.ops.matmul.api import matmul
from kernelwright.ops.rms_norm.api import rms_norm
from kernelwright.ops.rope.api import rope
from kernelwright.ops.softmax.api import log_softmax, softmax
from kernelwright.ops.swiglu.api import swiglu
from kernelwright.ops.vector_add.api import vector_add

__all__ = ["matmul", "softmax", "log_softmax", "vector_add", "swiglu", "rope", "cross_entropy",
           "rms_norm", "layer_norm", "add_rms_norm", "attention", "attention_varlen", "activation"]
