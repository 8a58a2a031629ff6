"""kernelwright: GPU kernel ladders for LLM building blocks, verified, timed and placed on the roofline.

>>> import torch, kernelwright
>>> y = kernelwright.ops.softmax(torch.randn(4, 1000), dim=-1)   # CPU: Triton's interpreter
>>> all(r.ok for r in kernelwright.verify("vector_add", dtypes=["bf16"]))
True
>>> rows = kernelwright.bench("softmax", sizes=[(64, 1024)], dtypes=["fp32"], db="results.db")

The device is settled at import (``KW_DEVICE`` = auto, cpu or cuda): without a GPU, Triton kernels run through
the interpreter.
"""

from kernelwright import runtime

runtime.select_device()

from kernelwright import ops  # noqa: E402
from kernelwright.api import bench, verify  # noqa: E402
from kernelwright.errors import Unavailable, UsageError  # noqa: E402
from kernelwright.patching import patch  # noqa: E402

__all__ = ["bench", "ops", "patch", "runtime", "verify", "Unavailable", "UsageError"]
__version__ = "0.1.0"
