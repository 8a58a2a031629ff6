"""Kernel inspection from cubins, no GPU: the occupancy calculator against hand-worked cases, resources and SASS
of NVRTC cubins against ptxas's own report, Triton kernels compiled under the CPU interpreter, missing tools."""

import functools
import io
import json
import os
import re

import pytest
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.errors import UsageError
from kernelwright.harness import inspect as ki

LDG, STG, LOCAL, MMA = "global load (LDG)", "global store (STG)", "local memory (LDL/STL)", "tensor-core MMA"


# --- the occupancy calculator ------------------------------------------------------------------------------------
# H100/H200: 64K registers in 4 sub-partitions of 16K, handed out 256 per warp; 228 KiB shared memory per SM,
# 1 KiB of it reserved per block; 64 warps and 32 blocks per SM.
@pytest.mark.parametrize("threads, regs, smem, blocks, limiters", [
    # 128 regs x 32 lanes = 4096 per warp, 4 warps per sub-partition: 16 warps = 2 blocks of 8 warps
    (256, 128, 0, 2, ("registers",)),
    # 48 KiB + 1 KiB reserved = 49 KiB per block; 228 // 49 = 4 (registers and warps would allow 16)
    (128, 32, 48 * 1024, 4, ("shared memory",)),
    # 64 warps // 32 warps per block = 2; 32 regs x 2048 threads also fill the register file exactly
    (1024, 32, 0, 2, ("threads", "registers")),
    # one-warp blocks: warps would allow 64, the SM holds 32 blocks at most
    (32, 16, 0, 32, ("blocks",)),
    # 80 regs: 2560 per warp, 6 warps per sub-partition = 24 (not 65536 // 2560 = 25: allocation is per quarter)
    (32, 80, 0, 24, ("registers",)),
    # 100 threads take 4 warps; 118 regs round up to 120 (3840 per warp): 4 per sub-partition, 16 warps, 4 blocks
    (100, 118, 0, 4, ("registers",)),
    # what does not fit one block launches nothing: 255 regs x 1024 threads, 228 KiB, 2048 threads
    (1024, 255, 0, 0, ("registers",)),
    (128, 32, 228 * 1024, 0, ("shared memory",)),
    (2048, 32, 0, 0, ("threads",)),
])
def test_occupancy_matches_hand_computed_cases(threads, regs, smem, blocks, limiters):
    occ = ki.occupancy(threads, regs, smem)
    assert occ.blocks_per_sm == blocks
    assert occ.limiters == limiters
    assert occ.warps_per_sm == blocks * -(-threads // 32)
    assert occ.percent == pytest.approx(100 * occ.warps_per_sm / 64)


def test_occupancy_on_ampere_has_less_shared_memory():
    # A100: 164 KiB per SM, so 49 KiB blocks fit 3 times (4 on Hopper)
    assert ki.occupancy(128, 32, 48 * 1024, ki.AMPERE).blocks_per_sm == 3
    assert ki.occupancy(128, 32, 164 * 1024, ki.AMPERE).blocks_per_sm == 0


def test_occupancy_rejects_an_empty_block():
    with pytest.raises(UsageError, match="threads_per_block"):
        ki.occupancy(0, 32)


# --- opcodes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opcode, bits, cls", [
    ("LDG.E.128", 128, LDG),
    ("LDG.E", 32, LDG),
    ("LDG.E.64.CONSTANT", 64, LDG),
    ("STS.U16", 16, "shared store (STS/STSM)"),
    ("LDSM.16.M88.4", 128, "shared load (LDS/LDSM)"),
    ("LDGSTS.E.BYPASS.128", 128, "cp.async (LDGSTS)"),
    ("LDL.LU.64", 64, LOCAL),
    ("HGMMA.64x128x16.F32", 32, MMA),
    ("HMMA.16816.F32", 32, MMA),
    ("UTMALDG.2D", 32, "TMA / bulk copy"),
    ("UIADD3", 32, "integer & address"),
    ("MUFU.EX2", 32, "special functions (MUFU)"),
    ("S2R", 32, "other"),
])
def test_opcode_widths_and_classes(opcode, bits, cls):
    assert ki.classify(opcode) == cls
    if cls in ki.MEMORY_CLASSES:
        assert ki.access_bits(opcode) == bits


def test_parse_sass_reads_both_tools_and_drops_predicates():
    cuobjdump = ("\t\tFunction : k\n"
                 "        /*0000*/                   LDC R1, c[0x0][0x28] ;   /* 0x00000a00ff017b82 */\n"
                 "                                                            /* 0x000fe20000000800 */\n"
                 "        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;\n")
    nvdisasm = ('\t.section\t.text.k,"ax",@progbits\n'
                "        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
                ".L_x_0:\n"
                "        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;\n")
    assert ki.parse_sass(cuobjdump) == ki.parse_sass(nvdisasm) == {"k": ["LDC", "LDG.E.128"]}


def _sass(body: list[tuple[int, str]], nvdisasm: bool) -> str:
    """A function ``k`` in either tool's format; ``BRA ->N`` branches to the instruction at address N."""
    targets = {int(op.split("->")[1]) for _, op in body if "->" in op}
    lines = ['\t.section\t.text.k,"ax",@progbits' if nvdisasm else "\t\tFunction : k"]
    for addr, op in body:
        if nvdisasm and addr in targets:
            lines.append(f".L_x_{addr}:")
        if "->" in op:
            name, to = op.split(" ->")
            op = f"{name} `(.L_x_{to})" if nvdisasm else f"{name} 0x{int(to):x}"
        lines.append(f"        /*{addr:04x}*/              {op} ;")
    return "\n".join(lines) + "\n"


def test_find_loops_reports_innermost_loops_per_iteration_in_both_formats():
    body = [(0x00, "LDC R1, c[0x0][0x28]")]
    body += [(0x10 + 16 * i, op) for i, op in enumerate(
        ["HGMMA.64x64x16.F32.BF16 R0, gdesc[UR4], RZ", "MUFU.EX2 R3, R3", "MUFU.EX2 R4, R4",
         "BAR.SYNC.DEFER_BLOCKING 0x0", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FFMA R1, R2, R3, R4", "NOP",
         "@P0 BRA ->16"])]  # the inner loop: 0x10..0x80, back to its first instruction
    body += [(0x90, "IADD3 R5, R5, 0x1, RZ"), (0xa0, "@P1 BRA ->16"),  # an outer loop around it: not innermost
             (0xb0, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2"), (0xc0, "@!P0 BRA ->176"),  # a spin-wait
             (0xd0, "@P2 BRA ->240"), (0xe0, "STG.E desc[UR4][R2.64], R1"), (0xf0, "EXIT")]  # a forward branch
    found = [ki.find_loops(_sass(body, nv), "k", min_instructions=3) for nv in (False, True)]
    assert found[0] == found[1] and len(found[0]) == 1
    (loop,) = found[0]
    assert (loop.start, loop.end, loop.mix.total) == (0x10, 0x80, 7)  # NOP left out
    assert ki.loop_summary(loop) == "0x0010-0x0080: 7 instructions (MMA 1, MUFU 2, BAR.SYNC 1, wgmma waits 1)"
    assert ki.find_loops(_sass(body, False), "k", min_instructions=2) == found[0] + [
        ki.Loop(0xb0, 0xc0, ki.instruction_mix(["SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA"]))]  # the spin-wait too
    assert ki.find_loops(_sass(body, False), "other") == []


# --- NVRTC cubins ------------------------------------------------------------------------------------------------
FLOAT4 = r"""
extern "C" __global__ void add4(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                                int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float4 x = a[i], y = b[i]; c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
}
extern "C" __global__ void stage(float* c) {
  __shared__ float t[1024];
  t[threadIdx.x] = threadIdx.x;
  __syncthreads();
  c[threadIdx.x] = t[1023 - threadIdx.x];
}
"""
# 48 live values and their 1128 pairwise products under a 32-register cap: ptxas must spill
SPILL = r"""
extern "C" __global__ void spilly(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) v[j] = x[i + j * n];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 48; ++j)
#pragma unroll
    for (int k = j + 1; k < 48; ++k) s += v[j] * v[k];
#pragma unroll
  for (int j = 0; j < 48; ++j) y[i + j * n] = v[j] * s;
}
"""


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.backends import nvrtc

    return nvrtc


@pytest.fixture
def sass_tool():
    if not (ki.find_tool("cuobjdump") or ki.find_tool("nvdisasm")):
        pytest.skip("no disassembler: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (the test extra)")


@functools.cache  # on the H200 (cuda-core 1.2.0) a second compile of one source came back without the log
def ptxas_says(source: str, max_register_count: int | None = None) -> dict[str, dict[str, int]]:
    """What ptxas -v reports per kernel when it compiles ``source`` (the compiler's own word, to check against)."""
    from cuda.core import Program, ProgramOptions

    log = io.StringIO()
    opts = ProgramOptions(arch="sm_90", std="c++17", max_register_count=max_register_count, ptxas_options=["-v"])
    Program(source, code_type="c++", options=opts).compile("cubin", logs=log)
    facts = {}
    for chunk in log.getvalue().split("Compiling entry function ")[1:]:
        name = re.match(r"'(\w+)'", chunk).group(1)
        numbers = {key: int(n) for n, key in re.findall(r"(\d+) (?:bytes )?(stack frame|spill stores|spill loads|"
                                                        r"registers|bytes smem)", chunk)}
        facts[name] = numbers
    assert facts, f"no ptxas -v log came back: {log.getvalue()!r}"
    return facts


def test_float4_kernel_shows_128_bit_loads_and_ptxas_register_count(nvrtc, sass_tool):
    cubin = nvrtc.compile_cubin(FLOAT4)
    told = ptxas_says(FLOAT4)
    report = ki.analyze(ki.Artifact("add4", cubin, threads_per_block=256, grid=(4096,)))
    assert report.registers == told["add4"]["registers"]
    assert report.static_smem == 0 and report.stack_bytes == 0
    assert report.mix.widths[LDG] == {128: 2} and report.mix.widths[STG] == {128: 1}
    assert [op for op in report.mix.opcodes if op.startswith("LDG")] == ["LDG.E.128.CONSTANT"]  # const __restrict__
    assert report.mix.classes[LOCAL] == 0 and report.mix.total == sum(report.mix.classes.values())
    assert report.occupancy == ki.occupancy(256, report.registers, 0)
    assert report.waves == pytest.approx(4096 / (report.occupancy.blocks_per_sm * 132))
    assert report.missing == () and report.warnings == ()
    json.dumps(report.to_dict())


def test_static_shared_memory_is_the_kernels_own(nvrtc):
    # sm_90 cubins hold the driver's reserved KiB in .nv.shared.<kernel>; the report counts it once, in occupancy
    report = ki.analyze(ki.Artifact("stage", nvrtc.compile_cubin(FLOAT4), threads_per_block=1024, dynamic_smem=512))
    assert report.static_smem == ptxas_says(FLOAT4)["stage"]["bytes smem"] == 4096
    assert report.occupancy.smem_per_block == 4096 + 512 + 1024


def test_spills_show_as_local_memory_traffic_matching_ptxas(nvrtc, sass_tool):
    cubin = nvrtc.compile_cubin(SPILL, nvrtc.CompileOptions(max_register_count=32))
    told = ptxas_says(SPILL, max_register_count=32)["spilly"]
    assert told["spill stores"] > 0  # the premise: this kernel does spill
    report = ki.analyze(ki.Artifact("spilly", cubin, threads_per_block=128))
    assert report.registers == told["registers"] <= 32
    assert report.stack_bytes == told["stack frame"]
    assert (report.mix.local_store_bytes, report.mix.local_load_bytes) == (told["spill stores"], told["spill loads"])
    assert report.mix.classes[LOCAL] > 0
    assert "STL" in ki.format_report(report)


def test_nvdisasm_gives_the_same_mix_as_cuobjdump(nvrtc, monkeypatch):
    if not (ki.find_tool("cuobjdump") and ki.find_tool("nvdisasm")):
        pytest.skip("needs both cuobjdump and nvdisasm (the test extra)")
    artifact = ki.Artifact("spilly", nvrtc.compile_cubin(SPILL, nvrtc.CompileOptions(max_register_count=32)), 128)
    with_cuobjdump = ki.analyze(artifact)
    real = ki.find_tool
    monkeypatch.setattr(ki, "find_tool", lambda name: None if name == "cuobjdump" else real(name))
    with_nvdisasm = ki.analyze(artifact)
    assert "nvdisasm" in with_nvdisasm.sass_tool and "cuobjdump" in with_cuobjdump.sass_tool
    assert with_nvdisasm.mix == with_cuobjdump.mix
    assert with_nvdisasm.loops == with_cuobjdump.loops  # branch targets: addresses in one, labels in the other


def test_missing_tools_are_reported_not_raised(nvrtc, monkeypatch):
    monkeypatch.setattr(ki, "find_tool", lambda name: None)
    cubin = nvrtc.compile_cubin(FLOAT4)
    report = ki.analyze(ki.Artifact("add4", cubin, threads_per_block=256))
    assert report.mix is None and report.sass_tool is None
    assert report.missing == ("cuobjdump not found: pip install nvidia-cuda-cuobjdump",
                              "nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    assert report.registers == ptxas_says(FLOAT4)["add4"]["registers"]  # the ELF needs no tool
    assert report.occupancy.blocks_per_sm > 0
    text = ki.format_report(report)
    assert "pip install nvidia-cuda-nvdisasm" in text and "occupancy" in text and "SASS" not in text


def test_wrong_kernel_name_or_not_a_cubin_is_a_usage_error(nvrtc):
    cubin = nvrtc.compile_cubin(FLOAT4)
    assert sorted(ki.cubin_kernels(cubin)) == ["add4", "stage"]
    with pytest.raises(UsageError, match="add4"):
        ki.analyze(ki.Artifact("add5", cubin, threads_per_block=256))
    with pytest.raises(UsageError, match="not a 64-bit ELF"):
        ki.analyze(ki.Artifact("add4", b"// PTX", threads_per_block=256))


def test_a_cubin_for_another_architecture_gets_a_warning(nvrtc):
    cubin = nvrtc.compile_cubin(FLOAT4, nvrtc.CompileOptions(arch="sm_80"))
    report = ki.analyze(ki.Artifact("add4", cubin, threads_per_block=256))
    assert report.arch == "sm_80" and "sm_80" in report.warnings[0]
    assert ki.analyze(ki.Artifact("add4", cubin, threads_per_block=256), ki.AMPERE).warnings == ()


# --- Triton ------------------------------------------------------------------------------------------------------
@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, _twice(x) + y + tl.max(x, 0), mask=mask)  # a helper and a library function


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * K + rk[None, :]
    b = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK
        b += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


SCALE_ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@pytest.fixture(autouse=True)
def _cold_triton_cache(tmp_path, monkeypatch):
    """Compile for real every time: a cache hit would skip the code generator that the interpreter can upset."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


def test_compile_triton_vectorises_as_the_alignment_allows(sass_tool):
    art = ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 1024}, grid=(64,))
    assert art.kernel == "_scale_add_kernel" and art.threads_per_block == 128 and art.grid == (64,)
    assert art.cubin[:4] == b"\x7fELF" and "def _scale_add_kernel" in art.source
    assert ki.analyze(art).mix.widths[LDG] == {32: 16}  # n may be any size: masked scalar loads, 8 x 2 per thread
    aligned = ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 1024},
                                aligned=["x_ptr", "y_ptr", "out_ptr", "n"])
    assert ki.analyze(aligned).mix.widths[LDG] == {128: 4}  # n % 16 == 0: whole float4s


def test_mma_amid_mufu_counts_wgmmas_issued_inside_the_exponentials():
    h, e, f = "HGMMA.64x64x16.F32.BF16", "MUFU.EX2", "FFMA"
    assert ki.instruction_mix([h, h, "WARPGROUP.DEPBAR.LE", e, e, f, h]).mma_amid_mufu == 0  # behind a wait
    assert ki.instruction_mix([e, f, h, f, e, h, "NOP", e]).mma_amid_mufu == 2  # both between exponentials
    assert ki.instruction_mix([e] + [f] * ki.AMID + [h, e]).mma_amid_mufu == 0  # the MUFU before is too far


def test_compile_triton_register_cap():
    # the kernel's uncapped count, then ptxas held under Triton's maxnreg (spilling whatever does not fit)
    free = ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 8192}, num_warps=4)
    capped = ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 8192}, num_warps=4, maxnreg=40)
    n_free, n_capped = (ki.read_cubin(a.cubin, a.kernel).registers for a in (free, capped))
    assert n_free > 40 >= n_capped, (n_free, n_capped)
    assert "maxnreg=40" in capped.note and "maxnreg" not in free.note
    for bad in (0, 300, 40.5):
        with pytest.raises(UsageError, match="maxnreg"):
            ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 8192}, maxnreg=bad)


@pytest.mark.skipif(not runtime.interpreting(), reason="checks the interpreter path (KW_DEVICE=cpu)")
def test_compile_triton_after_the_interpreter_ran_and_before_it_runs_again():
    import torch

    def run_interpreted():
        x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
        _scale_add_kernel[(1,)](x, y, out, 1000, BLOCK=1024)
        torch.testing.assert_close(out, 2 * x + y + x.max())

    run_interpreted()  # its tl.max call left triton.language.core patched (Triton 3.6) before kernelwright's fix
    art = ki.compile_triton(_scale_add_kernel, SCALE_ADD_SIG, {"BLOCK": 1024})
    assert ki.read_cubin(art.cubin, art.kernel).registers > 0
    assert os.environ["TRITON_INTERPRET"] == "1" and triton.knobs.runtime.interpret
    run_interpreted()


@pytest.mark.skipif(not runtime.interpreting(), reason="checks the interpreter path (KW_DEVICE=cpu)")
def test_an_interpreted_kernel_leaves_triton_language_as_it_found_it():
    # Triton 3.6's device-function call (the helper, tl.max) swaps triton.language.core's builtins for interpreter
    # wrappers and never swaps them back; importing kernelwright on the CPU makes it restore them on return
    import torch

    mods = [tl, tl.core, tl.math]
    before = [dict(vars(m)) for m in mods]
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    _scale_add_kernel[(2,)](x, y, out, 1000, BLOCK=512)
    block_max = torch.stack([x[:512].max(), x[512:].max()]).repeat_interleave(512)[:1000]
    torch.testing.assert_close(out, 2 * x + y + block_max)
    for m, was in zip(mods, before, strict=True):
        changed = sorted(n for n, v in was.items() if vars(m).get(n) is not v)
        assert not changed, f"{m.__name__}: {len(changed)} names left patched, e.g. {changed[:4]}"


def test_compile_triton_fp16_dot_uses_hopper_tensor_cores(sass_tool):
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
    art = ki.compile_triton(_matmul_kernel, sig, {"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=3,
                            grid=(32, 32), aligned=["a_ptr", "b_ptr", "c_ptr", "N", "K"])
    assert art.threads_per_block == 256
    assert art.dynamic_smem == 3 * (128 * 64 + 64 * 128) * 2  # three stages of fp16 A and B tiles
    report = ki.analyze(art)
    assert report.arch == "sm_90" and report.static_smem == 0
    assert report.mix.classes[MMA] > 0
    assert all(op.startswith("HGMMA.64x128x16") for op in report.mix.opcodes if ki.classify(op) == MMA)  # wgmma
    assert report.mix.widths["cp.async (LDGSTS)"] == {128: report.mix.classes["cp.async (LDGSTS)"]}
    assert report.occupancy == ki.occupancy(256, report.registers, art.dynamic_smem)
    assert "HGMMA.64x128x16.F32" in ki.format_report(report)


def test_compile_triton_names_what_the_signature_lacks():
    with pytest.raises(UsageError, match="no type or value for n"):
        ki.compile_triton(_scale_add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"},
                          {"BLOCK": 128})
    with pytest.raises(UsageError, match="unknown m"):
        ki.compile_triton(_scale_add_kernel, {**SCALE_ADD_SIG, "m": "i32"}, {"BLOCK": 128})
    with pytest.raises(UsageError, match="@triton.jit"):
        ki.compile_triton(lambda x: x, {}, {})
