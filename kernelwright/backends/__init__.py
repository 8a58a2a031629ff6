"""Ways to build kernels other than Triton's JIT: CUDA C through NVRTC (nvrtc.py)."""
