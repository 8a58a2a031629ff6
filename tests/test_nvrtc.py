"""CUDA C through NVRTC compiles on a machine without a GPU; the cache and the error path."""

import pytest

from kernelwright.backends import nvrtc

pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")

SRC = 'extern "C" __global__ void scale(float* x, float a, int n) {\n' \
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= a;\n}\n"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KW_CACHE_DIR", str(tmp_path))


def test_compiles_to_a_cubin_and_caches_it(monkeypatch):
    cubin = nvrtc.compile_cubin(SRC)
    assert cubin[:4] == b"\x7fELF"
    files = list(nvrtc.cache_dir().glob("*.cubin"))
    assert len(files) == 1

    def no_compiler(*a, **k):
        raise AssertionError("compiled again instead of reading the cache")

    monkeypatch.setattr(nvrtc, "_toolchain", lambda real=nvrtc._toolchain: (no_compiler, *real()[1:]))
    assert nvrtc.compile_cubin(SRC) == cubin


def test_options_change_the_key():
    nvrtc.compile_cubin(SRC)
    nvrtc.compile_cubin(SRC, nvrtc.CompileOptions(defines=("BLOCK=128",)))
    assert len(list(nvrtc.cache_dir().glob("*.cubin"))) == 2


def test_corrupt_cache_file_is_rebuilt():
    cubin = nvrtc.compile_cubin(SRC)
    (path,) = nvrtc.cache_dir().glob("*.cubin")
    path.write_bytes(b"garbage")
    assert nvrtc.compile_cubin(SRC) == cubin and path.read_bytes() == cubin


def test_compile_error_shows_the_log(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = not_declared; }\n')
    with pytest.raises(nvrtc.CompileError) as e:
        nvrtc.compile_file(bad)
    assert "not_declared" in e.value.log and str(bad) in str(e.value)
