"""What a compiled kernel will do on the GPU, read from its cubin alone: the why behind a timing, at no GPU time.

An :class:`Artifact` is one kernel as it will be launched (cubin, block size, dynamic shared memory, grid).
:func:`analyze` reads from it:

* **resources**, from the cubin's ELF with a small reader here (no tool needed): registers per thread
  (``EIATTR_REGCOUNT`` in ``.nv.info``), per-thread stack (``EIATTR_FRAME_SIZE`` / ``*_STACK_SIZE``) and
  static shared memory (the size of ``.nv.shared.<kernel>``). ``cuobjdump --dump-resource-usage`` prints the
  same numbers, except that sm_90+ cubins from recent ptxas (12.8 in Triton's wheel, 13.x) hold the 1 KiB of
  shared memory the driver reserves per block inside ``.nv.shared.<kernel>`` (the kernel's variables start at
  0x400; ``ptxas -v`` does not count it), so ``SHARED`` there is 1 KiB more than the kernel's own; here that
  KiB is counted once, as the reserved memory of the occupancy calculation.
* **theoretical occupancy**, computed as CUDA's occupancy calculator (``cuda_occupancy.h``) does, from the
  resources and the launch geometry under an :class:`ArchLimits` table (:data:`HOPPER`, :data:`AMPERE`).
* **the SASS instruction mix**, static counts from ``cuobjdump -sass`` or ``nvdisasm`` (found on PATH, in the
  CUDA toolkit, in the ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` wheels or in Triton's wheel), grouped
  into classes that explain speed: tensor-core MMA, FFMA, loads and stores by width, cp.async, TMA, local memory.
  Where no tool runs, the report says so in ``missing`` and shows the rest.
* **the innermost loops** (:func:`find_loops`), from the same text: a kernel's steady state, with per-iteration
  counts of what the mix counts once (tensor-core MMAs, MUFU, memory, block barriers, wgmma waits).

:func:`compile_triton` makes an Artifact from a ``@triton.jit`` kernel for sm_90 on a machine without a GPU,
also under the CPU interpreter (``TRITON_INTERPRET=1``). :func:`format_report` prints a report.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelwright.errors import Unavailable, UsageError


@dataclass(frozen=True)
class Artifact:
    """One compiled kernel as it will be launched.

    ``cubin`` is the ELF image (NVRTC's ``compile("cubin")``, Triton's ``asm["cubin"]``); ``kernel`` its symbol
    name (mangled for C++ linkage). ``dynamic_smem`` is the dynamic shared memory per block in bytes the launch
    asks for; ``grid`` the launch grid in blocks, ``()`` when not known. ``source`` and ``note`` are for people.
    """

    kernel: str
    cubin: bytes
    threads_per_block: int
    dynamic_smem: int = 0
    grid: tuple = ()
    source: str = ""
    note: str = ""


# --- architecture limits and the occupancy calculator ------------------------------------------------------------
@dataclass(frozen=True)
class ArchLimits:
    """Per-SM and per-block limits of one GPU architecture, as CUDA's occupancy calculator uses them.

    Shared memory sizes are the largest carve-out (the driver picks it when a kernel needs it);
    ``max_smem_per_block`` is the opt-in limit for one block's static + dynamic shared memory, without the
    ``reserved_smem_per_block`` the driver adds to every block. ``sm_count`` is for waves only.
    """

    name: str
    sm: int
    sm_count: int
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    reg_alloc_unit: int = 256  # registers are handed to warps in chunks of 256 (8 per thread)
    max_regs_per_thread: int = 255
    reg_sub_partitions: int = 4  # each SM sub-partition has its own quarter of the register file
    smem_per_sm: int = 228 * 1024
    max_smem_per_block: int = 227 * 1024
    reserved_smem_per_block: int = 1024
    smem_alloc_unit: int = 128
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


HOPPER = ArchLimits(name="sm_90 (H100/H200 SXM)", sm=90, sm_count=132)
AMPERE = ArchLimits(name="sm_80 (A100)", sm=80, sm_count=108, smem_per_sm=164 * 1024, max_smem_per_block=163 * 1024)

# in the order a tie is reported: the block geometry first (no code change moves it), then the kernel's resources
RESOURCES = ("threads", "blocks", "registers", "shared memory")


@dataclass(frozen=True)
class Occupancy:
    """Theoretical occupancy of one SM.

    ``block_limits`` holds how many blocks each resource alone would allow; ``limiters`` the resources at the
    minimum, in :data:`RESOURCES` order. ``blocks_per_sm == 0`` means the launch fails (too many threads,
    registers or shared memory for one block).
    """

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    percent: float
    limiters: tuple[str, ...]
    block_limits: dict[str, int]
    regs_per_block: int
    smem_per_block: int


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(threads_per_block: int, registers: int, smem_per_block: int = 0,
              limits: ArchLimits = HOPPER) -> Occupancy:
    """Blocks and warps one SM holds at once, and what limits them (CUDA's occupancy calculation).

    Parameters
    ----------
    threads_per_block : int
        Threads per block (rounded up to whole warps, as the hardware allocates them).
    registers : int
        Registers per thread, as the compiler reports them.
    smem_per_block : int
        Static plus dynamic shared memory per block in bytes, without the driver's reserved
        ``limits.reserved_smem_per_block`` (added here).
    limits : ArchLimits
        The architecture's limits, :data:`HOPPER` by default.

    Returns
    -------
    Occupancy
        ``percent`` is active warps over ``limits.max_warps_per_sm``.
    """
    if threads_per_block <= 0:
        raise UsageError(f"threads_per_block: expected a positive number, got {threads_per_block}")
    warps = -(-threads_per_block // limits.warp_size)
    by_threads = 0 if threads_per_block > limits.max_threads_per_block else limits.max_warps_per_sm // warps

    regs_per_warp = _round_up(max(registers, 1) * limits.warp_size, limits.reg_alloc_unit)
    # the hardware checks a block's registers as if its warps filled every sub-partition evenly
    regs_checked = regs_per_warp * _round_up(warps, limits.reg_sub_partitions)
    if registers > limits.max_regs_per_thread or regs_checked > limits.regs_per_block:
        by_regs = 0
    else:
        warps_per_sub = limits.regs_per_sm // limits.reg_sub_partitions // regs_per_warp
        by_regs = warps_per_sub * limits.reg_sub_partitions // warps

    smem_alloc = _round_up(smem_per_block + limits.reserved_smem_per_block, limits.smem_alloc_unit)
    by_smem = 0 if smem_per_block > limits.max_smem_per_block else limits.smem_per_sm // smem_alloc

    block_limits = {"threads": by_threads, "blocks": limits.max_blocks_per_sm, "registers": by_regs,
                    "shared memory": by_smem}
    blocks = min(block_limits.values())
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=blocks * warps,
        max_warps_per_sm=limits.max_warps_per_sm,
        percent=100.0 * blocks * warps / limits.max_warps_per_sm,
        limiters=tuple(r for r in RESOURCES if block_limits[r] == blocks),
        block_limits=block_limits,
        regs_per_block=regs_per_warp * warps,
        smem_per_block=smem_alloc,
    )


# --- the cubin's ELF: registers, stack, shared memory ------------------------------------------------------------
@dataclass(frozen=True)
class CubinResources:
    """What the cubin records about one kernel. ``static_smem`` excludes the driver-reserved KiB (module doc)."""

    kernel: str
    sm: int
    registers: int
    stack_bytes: int
    static_smem: int


_EIFMT_SVAL = 0x04  # .nv.info entries: u8 format, u8 attribute, then u16 value, or u16 size + payload for SVAL
_EIATTR_FRAME_SIZE, _EIATTR_MIN_STACK_SIZE, _EIATTR_MAX_STACK_SIZE, _EIATTR_REGCOUNT = 0x11, 0x12, 0x23, 0x2F
_RESERVED_SMEM_SYMBOL = "__nv_reservedSMEM_offset_0_alias"  # present when the reserved KiB is in the sections
_RESERVED_SMEM = 1024


def _elf(cubin: bytes) -> tuple[int, dict[str, tuple[int, int, int]], list[tuple[str, int, int]]]:
    """(e_flags, {section name: (offset, size, index)}, [(symbol name, section index, symbol index)])."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise UsageError("cubin: not a 64-bit ELF image (a cubin, not PTX or a fatbin, is expected)")
    flags, = struct.unpack_from("<I", cubin, 0x30)
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]

    def string(table: int, at: int) -> str:
        start = headers[table][4] + at
        return cubin[start:cubin.index(b"\0", start)].decode()

    sections = {string(shstrndx, h[0]): (h[4], h[5], i) for i, h in enumerate(headers)}
    symbols = []
    for h in headers:
        if h[1] == 2:  # SHT_SYMTAB; h[6] links its string table
            for n, at in enumerate(range(h[4], h[4] + h[5], 24)):
                name_at, _info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", cubin, at)
                symbols.append((string(h[6], name_at), shndx, n))
    return flags, sections, symbols


def cubin_kernels(cubin: bytes) -> list[str]:
    """Names of the functions with code in ``cubin`` (symbols whose section is ``.text.<name>``)."""
    _, sections, symbols = _elf(cubin)
    text = {index: name[len(".text."):] for name, (_, _, index) in sections.items() if name.startswith(".text.")}
    return [name for name, shndx, _ in symbols if text.get(shndx) == name]


def read_cubin(cubin: bytes, kernel: str) -> CubinResources:
    """Registers, stack and static shared memory of ``kernel``, read from the cubin's ELF sections.

    Parameters
    ----------
    cubin : bytes
        The ELF image.
    kernel : str
        The kernel's symbol name.

    Returns
    -------
    CubinResources
        ``sm`` is the architecture the cubin was built for (90 for sm_90 and sm_90a).
    """
    flags, sections, symbols = _elf(cubin)
    if kernel not in cubin_kernels(cubin):
        raise UsageError(f"kernel: {kernel!r} is not in the cubin, which has {', '.join(cubin_kernels(cubin))}")
    index = next(n for name, _, n in symbols if name == kernel)
    # e_flags holds the SM: bits 8-15 in the ELF ABI that CUDA 13's ptxas writes (OSABI 0x41), bits 0-7 before
    sm = (flags >> 8) & 0xFF if cubin[7] == 0x41 else flags & 0xFF
    attrs: dict[int, int] = {}
    for name, (offset, size, _) in sections.items():
        if name != ".nv.info" and name != f".nv.info.{kernel}":
            continue
        at = offset
        while at < offset + size:
            fmt, attr = cubin[at], cubin[at + 1]
            if fmt != _EIFMT_SVAL:
                at += 4
                continue
            length, = struct.unpack_from("<H", cubin, at + 2)
            if length == 8 and struct.unpack_from("<I", cubin, at + 4)[0] == index:
                attrs[attr] = struct.unpack_from("<I", cubin, at + 8)[0]
            at += 4 + length
    if _EIATTR_REGCOUNT not in attrs:
        raise UsageError(f"cubin: no register count recorded for {kernel!r}")
    smem = sections.get(f".nv.shared.{kernel}", (0, 0, 0))[1]
    if any(name == _RESERVED_SMEM_SYMBOL for name, _, _ in symbols):
        smem = max(smem - _RESERVED_SMEM, 0)
    stack = max(attrs.get(a, 0) for a in (_EIATTR_FRAME_SIZE, _EIATTR_MIN_STACK_SIZE, _EIATTR_MAX_STACK_SIZE))
    return CubinResources(kernel=kernel, sm=sm, registers=attrs[_EIATTR_REGCOUNT], stack_bytes=stack,
                          static_smem=smem)


# --- tools -------------------------------------------------------------------------------------------------------
TOOLS = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}  # tool -> pip package


def _package_dir(name: str) -> list[Path]:
    """Folders of an installed package, found without importing it (triton must not be imported from here)."""
    spec = importlib.util.find_spec(name)
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def tool_dirs() -> list[Path]:
    """Where tools are looked for after PATH, in order: the CUDA toolkit, the NVIDIA wheels, Triton's wheel."""
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    dirs.append(Path("/usr/local/cuda/bin"))
    for root in _package_dir("nvidia"):  # nvidia/cu13/bin (CUDA 13 wheels), nvidia/cuda_cuobjdump/bin (CUDA 12)
        dirs += sorted(root.glob("*/bin"), reverse=True)
    dirs += [root / "backends" / "nvidia" / "bin" for root in _package_dir("triton")]
    return dirs


def find_tool(name: str) -> str | None:
    """Path of the CUDA binary ``name`` (``cuobjdump``, ``nvdisasm``): PATH first, then :func:`tool_dirs`."""
    found = shutil.which(name)
    if found:
        return found
    for d in tool_dirs():
        path = d / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


# --- SASS --------------------------------------------------------------------------------------------------------
# instruction lines of both tools: "/*0160*/   @!P0 STG.E desc[UR4][R2.64], R7 ;" (cuobjdump adds the encoding)
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P(?:T|\d)\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*)")
_FUNCTION = re.compile(r"^\s*(?:Function : (\S+)|\.section\s+\.text\.([^,\s]+))")  # cuobjdump | nvdisasm

MIX_CLASSES = (
    "tensor-core MMA", "FP32 FMA (FFMA)", "other FP", "special functions (MUFU)",
    "global load (LDG)", "global store (STG)", "shared load (LDS/LDSM)", "shared store (STS/STSM)",
    "cp.async (LDGSTS)", "TMA / bulk copy", "local memory (LDL/STL)", "atomics",
    "warp shuffle/vote", "barriers & fences", "branches & control", "integer & address", "other",
)
MEMORY_CLASSES = (*MIX_CLASSES[4:9], MIX_CLASSES[10])  # per-thread accesses with a width (a TMA copy moves a tile)
_CLASS_OF = {
    **dict.fromkeys(("FFMA", "FFMA2"), MIX_CLASSES[1]),
    **dict.fromkeys(("FADD", "FADD2", "FMUL", "FMUL2", "FMNMX", "FSETP", "FSET", "FSEL", "FCHK", "FRND", "FSWZADD",
                     "HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "HSET2", "DADD", "DMUL", "DFMA", "DSETP",
                     "DMNMX", "F2F", "F2I", "I2F", "I2FP", "F2FP", "F2IP"), MIX_CLASSES[2]),
    "MUFU": MIX_CLASSES[3],
    "LDG": MIX_CLASSES[4], "STG": MIX_CLASSES[5],
    "LDS": MIX_CLASSES[6], "LDSM": MIX_CLASSES[6], "STS": MIX_CLASSES[7], "STSM": MIX_CLASSES[7],
    "LDGSTS": MIX_CLASSES[8],
    **dict.fromkeys(("UTMALDG", "UTMASTG", "UTMAPF", "UTMACCTL", "UTMAREDG", "UBLKCP", "UBLKRED", "UBLKPF"),
                    MIX_CLASSES[9]),
    "LDL": MIX_CLASSES[10], "STL": MIX_CLASSES[10],
    **dict.fromkeys(("ATOM", "ATOMG", "ATOMS", "RED", "REDG"), MIX_CLASSES[11]),
    **dict.fromkeys(("SHFL", "REDUX", "VOTE", "VOTEU", "MATCH", "ELECT"), MIX_CLASSES[12]),
    **dict.fromkeys(("BAR", "SYNCS", "MEMBAR", "DEPBAR", "LDGDEPBAR", "WARPGROUP", "WARPSYNC", "FENCE", "ERRBAR",
                     "CCTL", "ARRIVES"), MIX_CLASSES[13]),
    **dict.fromkeys(("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "BMOV", "KILL",
                     "YIELD", "NANOSLEEP", "BPT"), MIX_CLASSES[14]),
    **dict.fromkeys(("IMAD", "IADD3", "IADD", "LEA", "LOP3", "SHF", "ISETP", "IMNMX", "VIADD", "VIADDMNMX",
                     "VIMNMX", "IABS", "POPC", "FLO", "BREV", "SGXT", "IMUL", "IDP", "BMSK"), MIX_CLASSES[15]),
}


def classify(opcode: str) -> str:
    """The :data:`MIX_CLASSES` entry of a SASS opcode such as ``LDG.E.128`` or ``HGMMA.64x128x16.F32``."""
    base = opcode.split(".", 1)[0]
    if base.endswith("MMA"):  # HMMA, HGMMA (wgmma), IMMA, DMMA, QGMMA, ... and Blackwell's UTC*MMA
        return MIX_CLASSES[0]
    if base in _CLASS_OF:
        return _CLASS_OF[base]
    if base.startswith("U") and base[1:] in _CLASS_OF:  # the uniform datapath: UIADD3, ULEA, USHF, ...
        return _CLASS_OF[base[1:]]
    return MIX_CLASSES[-1]


def access_bits(opcode: str) -> int:
    """Bits one thread moves with a load or store opcode: ``LDG.E.128`` 128, ``STS.U16`` 16, ``LDSM...4`` 128."""
    base, *mods = opcode.split(".")
    if base in ("LDSM", "STSM"):  # .M88.4: four 8x8 b16 matrices, 32 bits per thread each
        return 32 * (int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1)
    for m in mods:
        if m in ("64", "128", "256"):
            return int(m)
        if m in ("U8", "S8", "U16", "S16"):
            return int(m[1:])
    return 32


@dataclass(frozen=True)
class InstructionMix:
    """Static instruction counts of one kernel (each instruction once, however often it runs; NOPs left out).

    ``classes`` maps every :data:`MIX_CLASSES` entry to its count, ``opcodes`` each opcode with its modifiers,
    ``widths`` each memory class to ``{bits per thread: count}``; ``local_store_bytes`` / ``local_load_bytes``
    are the bytes per thread that the STL / LDL instructions move, which is what ``ptxas -v`` reports as spill
    stores / loads, plus the accesses to local arrays when the kernel has any. ``mma_amid_mufu``: tensor-core
    MMAs with a MUFU instruction among the :data:`AMID` instructions before them and among the :data:`AMID` after,
    i.e. issued in the middle of special-function work (an asynchronous wgmma there overlaps it, as in
    FlashAttention-3's softmax; 0 when every MMA waits behind or ahead of the exponentials).
    """

    total: int
    classes: dict[str, int]
    opcodes: dict[str, int]
    widths: dict[str, dict[int, int]]
    local_store_bytes: int
    local_load_bytes: int
    mma_amid_mufu: int = 0


AMID = 6
"""the window, in instructions on each side, within which :attr:`InstructionMix.mma_amid_mufu` looks for MUFU"""


def _mma_amid_mufu(opcodes: list[str]) -> int:
    ops = [op for op in opcodes if op != "NOP"]
    mufu = [classify(op) == MIX_CLASSES[3] for op in ops]
    return sum(1 for i, op in enumerate(ops) if classify(op) == MIX_CLASSES[0]
               and any(mufu[max(0, i - AMID):i]) and any(mufu[i + 1:i + 1 + AMID]))


def instruction_mix(opcodes: list[str]) -> InstructionMix:
    """Count and classify SASS opcodes (as :func:`parse_sass` returns them).

    Parameters
    ----------
    opcodes : list of str
        One opcode with modifiers per instruction, predicates removed.

    Returns
    -------
    InstructionMix
    """
    counts = Counter(op for op in opcodes if op != "NOP")
    classes = dict.fromkeys(MIX_CLASSES, 0)
    widths: dict[str, Counter] = {}
    local = Counter()
    for op, n in counts.items():
        cls = classify(op)
        classes[cls] += n
        if cls in MEMORY_CLASSES:
            widths.setdefault(cls, Counter())[access_bits(op)] += n
            if cls == MIX_CLASSES[10]:
                local[op[:3]] += n * access_bits(op) // 8
    return InstructionMix(
        total=sum(counts.values()),
        classes=classes,
        opcodes=dict(counts.most_common()),
        widths={cls: dict(sorted(w.items())) for cls, w in widths.items()},
        local_store_bytes=local["STL"],
        local_load_bytes=local["LDL"],
        mma_amid_mufu=_mma_amid_mufu(opcodes),
    )


_LABEL = re.compile(r"^\s*(\.L_x_\d+):")  # nvdisasm's branch targets


def _sass_lines(text: str):
    """``(function, address, opcode, operands, labels)`` for each instruction of ``cuobjdump -sass`` or ``nvdisasm``
    text; ``labels``: the nvdisasm labels that name this instruction's address."""
    current, labels = None, []
    for line in text.splitlines():
        header = _FUNCTION.match(line)
        if header:
            current, labels = header.group(1) or header.group(2), []
            continue
        label = _LABEL.match(line)
        if label:
            labels.append(label.group(1))
            continue
        instruction = _INSTRUCTION.search(line)
        if instruction and current is not None:
            yield current, int(instruction.group(1), 16), instruction.group(2), instruction.group(3), labels
            labels = []


def parse_sass(text: str) -> dict[str, list[str]]:
    """Opcodes per function from ``cuobjdump -sass`` or ``nvdisasm`` output: ``{kernel: [opcode, ...]}``."""
    functions: dict[str, list[str]] = {}
    for function, _, opcode, _, _ in _sass_lines(text):
        functions.setdefault(function, []).append(opcode)
    return functions


def _disassembly(cubin: bytes, kernel: str) -> tuple[str | None, list[str] | None, str | None, list[str]]:
    """(the tool's SASS text, ``kernel``'s opcodes, the tool, problems): see :func:`disassemble`."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        for name, args in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])):
            tool = find_tool(name)
            if tool is None:
                problems.append(f"{name} not found: pip install {TOOLS[name]}")
                continue
            run = subprocess.run([tool, *args, str(path)], capture_output=True, text=True, timeout=120)
            opcodes = parse_sass(run.stdout).get(kernel)
            if run.returncode == 0 and opcodes:
                return run.stdout, opcodes, tool, problems
            problems.append(f"{tool} failed (exit {run.returncode}): {run.stderr.strip()[-300:]}")
    return None, None, None, problems


def disassemble(cubin: bytes, kernel: str) -> tuple[list[str] | None, str | None, list[str]]:
    """SASS opcodes of ``kernel``, through ``cuobjdump -sass``, else ``nvdisasm``.

    Returns
    -------
    opcodes : list of str or None
        None when no tool could disassemble the cubin.
    tool : str or None
        Path of the tool that did.
    problems : list of str
        Why each tool that was tried could not, with how to get it when it is missing.
    """
    _, opcodes, tool, problems = _disassembly(cubin, kernel)
    return opcodes, tool, problems


# --- loops: where a kernel spends its time ---------------------------------------------------------------------
_TARGET = re.compile(r"0x([0-9a-f]+)|`\((\.L_x_\d+)\)")


@dataclass(frozen=True)
class Loop:
    """An innermost loop of the SASS: the instructions from a backward branch's target to the branch itself
    (``start``, ``end``: their byte offsets), with no other loop inside. A compiled kernel's steady state runs
    here, so these counts are per iteration, where :class:`InstructionMix` counts the whole kernel once. Static
    counts: a branch inside the body (a rarely taken rescale, say) is counted as if always taken."""

    start: int
    end: int
    mix: InstructionMix


def find_loops(text: str, kernel: str, min_instructions: int = 16) -> list[Loop]:
    """The innermost loops of ``kernel`` in ``cuobjdump -sass`` or ``nvdisasm -c`` text, in address order; loops
    of fewer than ``min_instructions`` (spin-waits such as a TMA barrier's try-wait) are left out."""
    ins: list[tuple[int, str, str]] = []
    labels: dict[str, int] = {}
    for function, addr, opcode, operands, names in _sass_lines(text):
        if function == kernel:
            labels.update(dict.fromkeys(names, addr))
            ins.append((addr, opcode, operands))
    spans = []
    for addr, op, rest in ins:
        if op.split(".", 1)[0] != "BRA":
            continue
        t = _TARGET.search(rest)
        target = int(t.group(1), 16) if t and t.group(1) else labels.get(t.group(2)) if t else None
        if target is not None and target <= addr:
            spans.append((target, addr))
    inner = [(a, b) for a, b in spans if not any((a, b) != (c, d) and a <= c and d <= b for c, d in spans)]
    loops = []
    for a, b in sorted(set(inner)):
        body = [op for addr, op, _ in ins if a <= addr <= b and op != "NOP"]
        if len(body) >= min_instructions:
            loops.append(Loop(a, b, instruction_mix(body)))
    return loops


def loop_summary(loop: Loop) -> str:
    """One line: the loop's size and what an iteration issues (tensor-core MMAs, MUFU, memory, block barriers,
    wgmma waits), zeros left out."""
    mix = loop.mix
    c = mix.classes
    bar_sync = sum(n for op, n in mix.opcodes.items() if op.startswith("BAR.SYNC"))
    waits = sum(n for op, n in mix.opcodes.items() if op.startswith("WARPGROUP.DEPBAR"))
    parts = [("MMA", c[MIX_CLASSES[0]]), ("MUFU", c[MIX_CLASSES[3]]), ("LDG", c[MIX_CLASSES[4]]),
             ("STG", c[MIX_CLASSES[5]]), ("LDS", c[MIX_CLASSES[6]]), ("STS", c[MIX_CLASSES[7]]),
             ("cp.async", c[MIX_CLASSES[8]]), ("TMA", c[MIX_CLASSES[9]]), ("local", c[MIX_CLASSES[10]]),
             ("BAR.SYNC", bar_sync), ("wgmma waits", waits)]
    shown = ", ".join(f"{name} {n}" for name, n in parts if n)
    return f"0x{loop.start:04x}-0x{loop.end:04x}: {mix.total} instructions" + (f" ({shown})" if shown else "")


# --- the report --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    """Everything :func:`analyze` found out about one artifact. ``mix`` is None where no disassembler ran;
    ``missing`` then says why, and what to install."""

    kernel: str
    arch: str
    limits: str
    threads_per_block: int
    grid: tuple
    dynamic_smem: int
    registers: int
    stack_bytes: int
    static_smem: int
    occupancy: Occupancy
    sm_count: int
    waves: float | None
    mix: InstructionMix | None
    sass_tool: str | None
    missing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    note: str = ""
    loops: tuple[Loop, ...] = ()
    """the kernel's innermost loops (:func:`find_loops`): per-iteration counts"""

    def to_dict(self) -> dict:
        """The report as plain JSON-ready data (nested dicts, lists and numbers)."""
        return dataclasses.asdict(self)


def analyze(artifact: Artifact, arch_limits: ArchLimits = HOPPER) -> Report:
    """Resources, occupancy and instruction mix of a compiled kernel, without a GPU.

    Parameters
    ----------
    artifact : Artifact
        The kernel and its launch geometry.
    arch_limits : ArchLimits
        Limits for the occupancy calculation, :data:`HOPPER` by default; a cubin built for another
        architecture is analysed anyway, with a note.

    Returns
    -------
    Report
        Raises :class:`~kernelwright.errors.UsageError` when the cubin is not an ELF image or lacks the kernel;
        a missing disassembler is reported in ``Report.missing``, never raised.
    """
    res = read_cubin(artifact.cubin, artifact.kernel)
    occ = occupancy(artifact.threads_per_block, res.registers, res.static_smem + artifact.dynamic_smem, arch_limits)
    blocks = math.prod(artifact.grid) if artifact.grid else 0
    waves = blocks / (occ.blocks_per_sm * arch_limits.sm_count) if blocks and occ.blocks_per_sm else None
    warnings = []
    if res.sm != arch_limits.sm:
        warnings.append(f"the cubin is for sm_{res.sm}; occupancy uses the limits of {arch_limits.name}")
    if occ.blocks_per_sm == 0:
        warnings.append(f"cannot launch: {' and '.join(occ.limiters)} exceed what one block may have")
    text, opcodes, tool, problems = _disassembly(artifact.cubin, artifact.kernel)
    return Report(
        kernel=artifact.kernel,
        arch=f"sm_{res.sm}",
        limits=arch_limits.name,
        threads_per_block=artifact.threads_per_block,
        grid=tuple(artifact.grid),
        dynamic_smem=artifact.dynamic_smem,
        registers=res.registers,
        stack_bytes=res.stack_bytes,
        static_smem=res.static_smem,
        occupancy=occ,
        sm_count=arch_limits.sm_count,
        waves=waves,
        mix=instruction_mix(opcodes) if opcodes else None,
        sass_tool=tool,
        missing=tuple(problems) if opcodes is None else (),
        warnings=tuple(warnings),
        note=artifact.note,
        loops=tuple(find_loops(text, artifact.kernel)) if text else (),
    )


def _bytes(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def _mix_rows(mix: InstructionMix) -> list[str]:
    rows = [f"  {'class':<26} {'count':>6} {'share':>6}  detail"]
    by_class: dict[str, list[str]] = {}
    for op, n in mix.opcodes.items():
        by_class.setdefault(classify(op), []).append(f"{op} x{n}")
    for cls, n in mix.classes.items():
        if cls in mix.widths:
            detail = ", ".join(f"{bits}-bit x{k}" for bits, k in mix.widths[cls].items())
        else:
            ops = by_class.get(cls, [])
            detail = ", ".join(ops[:3]) + (f", +{len(ops) - 3} more" if len(ops) > 3 else "")
        rows.append(f"  {cls:<26} {n:>6} {100 * n / max(mix.total, 1):>5.1f}%  {detail}".rstrip())
    return rows


def format_report(report: Report) -> str:
    """A compact text block: geometry, resources, occupancy and its limiter, the instruction mix, what is missing.

    Parameters
    ----------
    report : Report
        As :func:`analyze` returns it.

    Returns
    -------
    str
        Lines without a trailing newline.
    """
    occ = report.occupancy
    warps = -(-report.threads_per_block // 32)
    grid = "x".join(map(str, report.grid)) if report.grid else "not given"
    lines = [
        f"kernel     {report.kernel}  ({report.arch} cubin; limits {report.limits})" +
        (f"  [{report.note}]" if report.note else ""),
        f"launch     {report.threads_per_block} threads/block ({warps} warps), grid {grid}, "
        f"dynamic smem {_bytes(report.dynamic_smem)}",
        f"registers  {report.registers}/thread ({occ.regs_per_block} allocated per block)",
        f"smem       {_bytes(report.static_smem)} static + {_bytes(report.dynamic_smem)} dynamic "
        f"= {_bytes(occ.smem_per_block)}/block with the KiB the driver reserves",
    ]
    local = f"stack {report.stack_bytes} B/thread"
    if report.mix:
        local += (f"; STL {report.mix.local_store_bytes} B, LDL {report.mix.local_load_bytes} B per thread "
                  "(spills, plus local arrays if any)")
    lines.append(f"local      {local}")
    also = occ.limiters[1:]
    limit = occ.limiters[0] + (f" ({', '.join(also)} also at the limit)" if also else "")
    lines.append(f"occupancy  {occ.blocks_per_sm} blocks/SM, {occ.warps_per_sm}/{occ.max_warps_per_sm} warps "
                 f"({occ.percent:.1f}%), limited by {limit}")
    lines.append("           blocks/SM each allows: " +
                 ", ".join(f"{r} {n}" for r, n in occ.block_limits.items()))
    if report.waves is not None:
        lines.append(f"waves      {report.waves:.2f} = {math.prod(report.grid)} blocks / "
                     f"({occ.blocks_per_sm} blocks/SM x {report.sm_count} SMs)")
    if report.mix:
        lines.append(f"SASS       {report.mix.total} instructions (static count, from {report.sass_tool})")
        lines += _mix_rows(report.mix)
        mma = report.mix.classes[MIX_CLASSES[0]]
        if mma and report.mix.classes[MIX_CLASSES[3]]:
            lines.append(f"overlap    {report.mix.mma_amid_mufu} of {mma} tensor-core MMAs issued amid MUFU work "
                         f"(a MUFU within {AMID} instructions on both sides)")
        lines += [f"loop       {loop_summary(loop)}" for loop in report.loops]
    lines += [f"missing    {m}" for m in report.missing]
    lines += [f"warning    {w}" for w in report.warnings]
    return "\n".join(lines)


# --- Triton ------------------------------------------------------------------------------------------------------
def _compiled_view(obj, memo: dict[int, object]):
    """``obj`` as Triton's compiler needs it: an interpreted ``@triton.jit`` function becomes a ``JITFunction``
    of the same Python function, whose globals are converted the same way (helpers, ``tl.max`` ...); a module
    holding interpreted functions becomes a module that converts on attribute access."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, InterpretedFunction):
        py = obj.fn
        scope = dict(py.__globals__)
        clone = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
        clone.__qualname__, clone.__kwdefaults__ = py.__qualname__, py.__kwdefaults__
        memo[id(obj)] = JITFunction(clone, **obj.kwargs)
        scope.update({k: _compiled_view(v, memo) for k, v in py.__globals__.items()})
        return memo[id(obj)]
    if isinstance(obj, types.ModuleType) and any(isinstance(v, InterpretedFunction) for v in vars(obj).values()):
        view = types.ModuleType(obj.__name__)
        view.__getattr__ = lambda name: _compiled_view(getattr(obj, name), memo)  # PEP 562
        memo[id(obj)] = view
        return view
    return obj


def undo_interpreter_leak(tl) -> None:
    """Put back what Triton 3.6's interpreter left patched in ``triton.language.core`` (``tl``: the module).

    The interpreter patches the Triton language modules in a ``@jit`` function's globals while it runs it. A
    kernel's patches are undone when it returns (triton PR 8735), but not those made when it calls a library
    function such as ``tl.max`` (whose globals hold ``triton.language.core``); the compiler then builds wrong IR
    ("'ir.value' object has no attribute 'dtype'"). Importing kernelwright on the CPU makes those calls restore
    what they patch (:func:`kernelwright.runtime._scope_interpreter_device_calls`); this is the compilers' second
    line, for a process where that could not be done. Every interpreted launch patches again what it needs.
    """
    for name, value in list(vars(tl.core).items()):
        if getattr(value, "__qualname__", "").startswith("_patch_attr."):  # a builtin's wrapper keeps the original
            setattr(tl.core, name, value.__kwdefaults__["member"])
        elif not name.startswith("_") and not isinstance(value, types.ModuleType) and hasattr(tl, name):
            setattr(tl.core, name, getattr(tl, name))  # triton.language re-exports core's objects, restored


def compile_triton(fn, signature: dict[str, str], constexprs: dict[str, object], *, num_warps: int = 4,
                   num_stages: int = 3, arch: int = 90, grid: tuple = (),
                   aligned: list[str] | None = None, maxnreg: int | None = None) -> Artifact:
    """Compile a ``@triton.jit`` kernel to a cubin without a GPU (Triton bundles ptxas).

    Works in a process that runs Triton through the CPU interpreter too: the interpreted function is rebuilt as
    a ``JITFunction`` (with its ``@triton.jit`` helpers and Triton's library functions) and the interpreter flag
    is cleared while compiling, then restored. Not thread-safe for that reason. Under the interpreter, call
    library functions as ``tl.sum(x)``: the method form ``x.sum()`` is not converted.

    Parameters
    ----------
    fn : triton JITFunction or InterpretedFunction
        The kernel (an autotuner or heuristics wrapper is unwrapped; its configs are not applied).
    signature : dict of str to str
        Triton type of every runtime argument, e.g. ``{"x_ptr": "*fp16", "n": "i32"}``.
    constexprs : dict of str to object
        Value of every ``tl.constexpr`` argument.
    num_warps, num_stages : int
        Triton's launch options; the block has ``32 * num_warps`` threads.
    arch : int
        Compute capability as an integer (90: Triton compiles sm_90a).
    grid : tuple of int
        The launch grid, carried into the artifact.
    aligned : list of str, optional
        Arguments Triton may assume divisible by 16, as its JIT specialises them at launch; default every pointer
        argument (PyTorch allocations are aligned). Name integer arguments (sizes, strides) that are multiples
        of 16 at launch, or the compiled code is not what runs.
    maxnreg : int, optional
        Triton's register cap per thread (its ``maxnreg`` launch option): ptxas spills what does not fit.

    Returns
    -------
    Artifact
        ``dynamic_smem`` is Triton's ``shared`` (Triton kernels take all their shared memory dynamically).
    """
    try:
        import triton
        import triton.compiler.code_generator  # noqa: F401  (its import must see the process's interpreter flag)
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        raise Unavailable("compiling Triton kernels needs triton: pip install triton") from None
    while not isinstance(fn, (JITFunction, InterpretedFunction)) and hasattr(fn, "fn"):
        fn = fn.fn
    if not isinstance(fn, (JITFunction, InterpretedFunction)):
        raise UsageError(f"fn: expected a @triton.jit function, got {type(fn).__name__}")
    if maxnreg is not None and not (isinstance(maxnreg, int) and 16 <= maxnreg <= 255):
        raise UsageError(f"maxnreg: expected an int from 16 to 255 registers a thread, got {maxnreg!r}")
    if isinstance(fn, InterpretedFunction):
        undo_interpreter_leak(triton.language)
    jit = _compiled_view(fn, {})
    names = jit.arg_names
    unknown = [n for n in [*signature, *constexprs, *(aligned or [])] if n not in names]
    untyped = [n for n in names if n not in signature and n not in constexprs]
    if unknown or untyped:
        raise UsageError(f"signature: {jit.fn.__name__} takes ({', '.join(names)}); "
                         + (f"unknown {', '.join(unknown)}; " if unknown else "")
                         + (f"no type or value for {', '.join(untyped)}" if untyped else ""))
    sig = {n: "constexpr" if n in constexprs else signature[n] for n in names}
    aligned = [n for n, t in sig.items() if t.startswith("*")] if aligned is None else aligned
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        compiled = triton.compile(ASTSource(jit, sig, dict(constexprs), attrs), target=GPUTarget("cuda", arch, 32),
                                  options={"num_warps": num_warps, "num_stages": num_stages,
                                           **({"maxnreg": maxnreg} if maxnreg is not None else {})})
    md = compiled.metadata
    return Artifact(kernel=md.name, cubin=compiled.asm["cubin"], threads_per_block=32 * md.num_warps,
                    dynamic_smem=md.shared, grid=tuple(grid), source=jit.src,
                    note=f"triton {triton.__version__}, num_warps={num_warps}, num_stages={num_stages}"
                    + (f", maxnreg={maxnreg}" if maxnreg is not None else ""))
