"""The worker-to-parent channel carries data only: builtins and tensors as raw bytes.

A candidate runs inside the worker, so whatever the worker sends may have been written by the candidate. An
ordinary pickle can name any callable and run it on load; this one is made of dicts, lists, strings, numbers and
bytes, and the parent reads it with an unpickler that refuses every global. Tensors travel as ``(dtype name,
shape, bytes)`` and are rebuilt on the CPU. Tensors of 1 MiB or more do not go through the pipe: the worker
copies them (straight from the device) into files of a folder the parent made for the job, in shared memory
(``/dev/shm``) where it has room, and the parent maps them; the message names the file.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import re
import stat
import tempfile

import torch

_TENSOR = "__kw_tensor__"
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64, torch.complex128)}
SPILL_BYTES = 1 << 20
_NAME = re.compile(r"t\d+")
_counter = itertools.count()


def spill_dir() -> str:
    """A new private folder for one job's large tensors: in ``/dev/shm`` when it has 8 GiB free, else the temp
    folder. The caller removes it."""
    base = None
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= 8 * 2**30 and os.access("/dev/shm", os.W_OK):
            base = "/dev/shm"
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="kw-eval-", dir=base)


def _bytes_view(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def _encode(obj, spill: str | None):
    if isinstance(obj, torch.Tensor):
        t = obj.detach().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in _DTYPES:
            raise TypeError(f"tensor dtype {t.dtype} cannot travel to the parent")
        head = {_TENSOR: True, "dtype": name, "shape": list(t.shape)}
        nbytes = t.numel() * t.element_size()
        if spill and nbytes >= SPILL_BYTES:
            fname = f"t{next(_counter)}"
            mapped = torch.from_file(os.path.join(spill, fname), shared=True, size=nbytes, dtype=torch.uint8)
            mapped.copy_(_bytes_view(t))  # a device tensor is copied straight into the shared file
            del mapped
            return {**head, "file": fname}
        return {**head, "data": _bytes_view(t.cpu()).numpy().tobytes()}
    if isinstance(obj, dict):
        return {str(k): _encode(v, spill) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, spill) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    raise TypeError(f"{type(obj).__name__} cannot travel to the parent")


def _decode(obj, spill: str | None):
    if isinstance(obj, dict):
        if obj.get(_TENSOR) is True:
            dtype = _DTYPES[obj["dtype"]]
            shape = [int(s) for s in obj["shape"]]
            numel = 1
            for s in shape:
                numel *= s
            nbytes = numel * torch.empty((), dtype=dtype).element_size()
            if "file" in obj:
                return _mapped(spill, obj["file"], nbytes).view(dtype).reshape(shape)
            data = obj["data"]
            if len(data) != nbytes:
                raise pickle.UnpicklingError(f"tensor of {nbytes} bytes sent as {len(data)}")
            if not nbytes:
                return torch.empty(shape, dtype=dtype)
            return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
        return {k: _decode(v, spill) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, spill) for v in obj]
    return obj


def _mapped(spill: str | None, name: str, nbytes: int) -> torch.Tensor:
    if spill is None or not isinstance(name, str) or not _NAME.fullmatch(name):
        raise pickle.UnpicklingError(f"bad tensor file name {name!r}")
    path = os.path.join(spill, name)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size < nbytes:  # no links, no file shorter than the tensor
        raise pickle.UnpicklingError(f"tensor file {name} is not a regular file of {nbytes} bytes")
    t = torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8)
    os.unlink(path)  # the mapping keeps the pages; the folder empties as tensors are read
    return t


def dumps(obj, spill: str | None = None) -> bytes:
    return pickle.dumps(_encode(obj, spill), protocol=pickle.HIGHEST_PROTOCOL)


class _DataOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the worker sent a reference to {module}.{name}; only data may travel")


def loads(data: bytes, spill: str | None = None):
    return _decode(_DataOnly(io.BytesIO(data)).load(), spill)
