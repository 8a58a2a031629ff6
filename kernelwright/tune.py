"""The autotuner every family uses: a config space per rung, pruned before any launch, searched with the core
timer, the winner cached on disk.

A rung declares a :class:`Space`: its configs (frozen dataclasses), a ``prune`` rule that rejects configs the
device cannot hold (shared memory, registers) without launching them, a shape ``bucket`` (problems in one bucket
share a winner) and a ``default`` config for when nothing is cached and tuning is off.

``best(space, size, dtype, make_call)`` is what a rung calls on every launch: a cached winner is returned at once
(memoised in memory; no timing); a miss on a CUDA device tunes there and then, like ``triton.autotune`` (turn it
off with ``KW_AUTOTUNE=0``); on CPU (the interpreter) the default is used. ``kw tune FAMILY`` fills the cache
ahead of time.

Cache: ``$KW_CACHE_DIR/tune/<space>.json`` (default ``~/.cache/kernelwright``), one file per space holding the
environment it was tuned in (device, driver, torch, triton, kernelwright, cache format) and the winners keyed by
``dtype|bucket``. A file from another device or other versions is stale and ignored (tuned again, then replaced);
a corrupt file or one in another format is ignored with a warning and rebuilt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelwright import runtime
from kernelwright.harness.inputs import dtype_name
from kernelwright.harness.timing import TimerConfig, time_fn

FORMAT = 1


@dataclass(frozen=True)
class Limits:
    """What one thread block may hold on the device: the pruning rules' inputs."""

    smem_per_block: int
    regs_per_sm: int
    max_threads_per_block: int
    sms: int

    @classmethod
    def current(cls) -> Limits:
        """The current CUDA device's limits; sm_90 (H100/H200) figures when there is no GPU."""
        if runtime.current_device() == "cuda":
            p = torch.cuda.get_device_properties(0)
            smem = int(getattr(p, "shared_memory_per_block_optin", 0) or 227 * 1024)
            regs = int(getattr(p, "regs_per_multiprocessor", 0) or 65536)
            return cls(smem, regs, int(getattr(p, "max_threads_per_block", 1024) or 1024), p.multi_processor_count)
        return cls(227 * 1024, 65536, 1024, 132)


@dataclass(frozen=True)
class Space:
    """A rung's config space. ``configs(dtype)`` lists candidates; ``prune(config, size, dtype, limits)`` says
    why one cannot run (``None`` if it can); ``bucket(size)`` maps a problem to its cache bucket;
    ``default(size, dtype)`` is used untuned."""

    name: str
    config_type: type
    configs: Callable[[torch.dtype], Sequence]
    prune: Callable[[object, tuple[int, ...], torch.dtype, Limits], str | None]
    bucket: Callable[[tuple[int, ...]], str]
    default: Callable[[tuple[int, ...], torch.dtype], object]


@dataclass
class Trial:
    config: object
    median_ms: float | None
    note: str = ""


@dataclass
class TuneResult:
    space: str
    key: str
    best: object
    median_ms: float | None
    source: str
    """``cache`` (reused, nothing timed), ``tuned`` (searched now) or ``default``"""
    trials: list[Trial] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "space": self.space, "key": self.key, "best": dataclasses.asdict(self.best), "median_ms": self.median_ms,
            "source": self.source,
            "trials": [{"config": dataclasses.asdict(t.config), "median_ms": t.median_ms, "note": t.note}
                       for t in self.trials],
        }


def pow2_bucket(n: int) -> int:
    """The power of two at or above ``n`` (1 for 0): problems up to twice apart share a tuned config."""
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def environment() -> dict:
    """What a tuned config depends on besides the problem: a cache from any other environment is stale."""
    import kernelwright

    facts = runtime.device_facts()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"format": FORMAT, "device": facts["device"], "driver": facts["driver"], "torch": torch.__version__,
            "triton": triton_version, "kernelwright": kernelwright.__version__}


def cache_path(space: Space) -> Path:
    base = os.environ.get("KW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelwright")
    return Path(base) / "tune" / f"{space.name}.json"


_memo: dict[tuple[str, str], object] = {}
_files: dict[str, dict] = {}


def _load(space: Space) -> dict:
    """The space's cached winners for this environment (``{}`` when missing, stale or corrupt)."""
    if space.name in _files:
        return _files[space.name]
    path = cache_path(space)
    entries: dict = {}
    try:
        text = path.read_text()
    except OSError:
        text = None
    if text is not None:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("env", {}).get("format") != FORMAT:
                raise ValueError(f"format {data.get('env', {}).get('format')!r}, expected {FORMAT}")
            if data["env"] == environment():
                entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict) and "config" in v}
            # else: tuned on another device or with other versions: stale, ignored, replaced when tuned again
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            warnings.warn(f"autotune cache {path} is unreadable or from another kernelwright version ({e}); "
                          "ignoring it, it will be rebuilt", stacklevel=3)
    _files[space.name] = entries
    return entries


def _save(space: Space, key: str, entry: dict) -> None:
    entries = dict(_load(space))
    entries[key] = entry
    _files[space.name] = entries
    path = cache_path(space)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump({"env": environment(), "entries": entries}, tmp, indent=1)
    os.replace(tmp.name, path)  # atomic: a reader sees the old file or the new one


def cache_key(space: Space, size: tuple[int, ...], dtype: torch.dtype) -> str:
    return f"{dtype_name(dtype)}|{space.bucket(tuple(size))}"


def lookup(space: Space, size: tuple[int, ...], dtype: torch.dtype):
    """The cached winner for this problem's bucket in this environment, or ``None``. Never times anything."""
    key = cache_key(space, size, dtype)
    if (space.name, key) in _memo:
        return _memo[(space.name, key)]
    entry = _load(space).get(key)
    if entry is None:
        return None
    try:
        config = space.config_type(**entry["config"])
    except TypeError:  # a config class that changed shape since: treat as a miss
        return None
    _memo[(space.name, key)] = config
    return config


def candidates(space: Space, size: tuple[int, ...], dtype: torch.dtype,
               limits: Limits | None = None) -> tuple[list, list[Trial]]:
    """(configs to time, configs pruned with their reason): no launch, no compile."""
    limits = limits or Limits.current()
    keep, pruned = [], []
    for cfg in space.configs(dtype):
        why = space.prune(cfg, tuple(size), dtype, limits)
        if why:
            pruned.append(Trial(cfg, None, f"pruned: {why}"))
        else:
            keep.append(cfg)
    return keep, pruned


TUNE_TIMER = TimerConfig(rel_spread=0.03, min_samples=5, max_samples=50, max_seconds=0.25, warmup_max_seconds=0.2)


def tune(space: Space, size: tuple[int, ...], dtype: torch.dtype, make_call: Callable[[object], Callable[[], object]],
         *, check: Callable[[object], bool] | None = None, timer: TimerConfig | None = None,
         on_step: Callable[[str], None] | None = None, save: bool = True,
         rotate: Callable[[object], list[Callable[[], object]]] | None = None) -> TuneResult:
    """Time every surviving config of ``space`` on one problem and cache the fastest.

    ``make_call(config)`` returns a no-argument callable that launches the rung with that config and returns
    its output; ``check(output)`` (optional) rejects a config whose result is wrong, so a fast wrong config can
    never win. A config that fails to compile or launch is noted and skipped. ``rotate(config)`` (optional)
    returns the same launch on other input sets, cycled through when a short kernel is timed in graph mode, so
    configs are ranked with operands coming from device memory, as ``kw bench`` times them (without it, graph
    replays of one input set find the operands in L2: on the H200, 6.1 us against 7.9 us for one 1024^3 config).
    """
    key = cache_key(space, size, dtype)
    keep, trials = candidates(space, size, dtype)
    timer = timer or TUNE_TIMER
    best, best_ms = None, None
    for i, cfg in enumerate(keep):
        if on_step:
            on_step(f"{space.name} {key} {i + 1}/{len(keep)}")
        try:
            call = make_call(cfg)
            out = call()
            if check is not None and not check(out):
                trials.append(Trial(cfg, None, "wrong result"))
                continue
            ms = time_fn(call, timer, rotate=(lambda c=cfg: rotate(c)) if rotate else None).median_ms
        except Exception as e:  # out of resources, compile error: this config is not a candidate
            first_line = str(e).splitlines()[0][:160] if str(e) else ""
            trials.append(Trial(cfg, None, f"failed: {type(e).__name__}: {first_line}"))
            continue
        trials.append(Trial(cfg, ms))
        if best_ms is None or ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        return TuneResult(space.name, key, space.default(tuple(size), dtype), None, "default", trials)
    _memo[(space.name, key)] = best
    if save:
        _save(space, key, {"config": dataclasses.asdict(best), "median_ms": best_ms, "size": list(size),
                           "timed": sum(t.median_ms is not None for t in trials), "tuned_at": time.strftime(
                               "%Y-%m-%dT%H:%M:%S")})
    return TuneResult(space.name, key, best, best_ms, "tuned", trials)


_suspended = 0


def autotune_enabled() -> bool:
    return runtime.current_device() == "cuda" and os.environ.get("KW_AUTOTUNE", "1") != "0" and not _suspended


@contextlib.contextmanager
def suspended():
    """No tuning inside (cached winners and defaults still apply): checking correctness on dozens of fuzz shapes
    must not time a config space for each one."""
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def best(space: Space, size: tuple[int, ...], dtype: torch.dtype,
         make_call: Callable[[object], Callable[[], object]] | None = None, **tune_kwargs):
    """The config a rung launches with: cached winner, else tuned now (CUDA, ``KW_AUTOTUNE`` not 0), else the
    space's default."""
    cfg = lookup(space, size, dtype)
    if cfg is not None:
        return cfg
    if make_call is not None and autotune_enabled():
        return tune(space, size, dtype, make_call, **tune_kwargs).best
    cfg = space.default(tuple(size), dtype)
    _memo[(space.name, cache_key(space, size, dtype))] = cfg
    return cfg


def forget(spaces: Iterable[str] | None = None) -> None:
    """Drop the in-memory copies (tests; after another process rewrote the cache)."""
    for k in list(_memo):
        if spaces is None or k[0] in spaces:
            del _memo[k]
    for name in list(_files):
        if spaces is None or name in spaces:
            del _files[name]
