"""Public ops, one per family. Each validates its inputs, then runs the rung asked for (``variant=``) or the
best rung for the device and shape. Kernels are compiled on first use."""

from kernelwright.ops.matmul.api import matmul
from kernelwright.ops.softmax.api import softmax
from kernelwright.ops.vector_add.api import vector_add

__all__ = ["matmul", "softmax", "vector_add"]
