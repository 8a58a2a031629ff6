"""Evaluation pools: many candidates judged at once, each by the evaluator's own public entry point.

Every worker runs :func:`run_job`, which calls :func:`kernelwright.eval.evaluate` (the same function behind
``kw eval``): the evaluator keeps one reference cache per worker process, so a worker pays for a problem's
reference outputs once and then one sandboxed process per candidate.

* :class:`LocalPool` — worker processes on this machine: by default one per GPU, each seeing only its GPU
  (``CUDA_VISIBLE_DEVICES``), or one per CPU core without a GPU.
* :class:`RayPool` — the same workers as Ray actors on an existing Ray cluster (``ray.init(address=...)``), one
  GPU each (``num_gpus=1``; one CPU each on a CPU-only cluster). Actors rather than one task per candidate: a GPU
  task gets a fresh worker process by default, which would pay for torch, the evaluator's process server and the
  reference outputs on every candidate. The reference travels as text, so workers need no shared filesystem.

A worker that dies mid-evaluation (killed, out of host memory) is restarted and the candidate retried once
(``retries``); after that the candidate's result is a ``crash`` verdict marked ``details.infrastructure``.
Workers never write the archive: the search records each result from the parent, one transaction per record,
so a killed worker cannot leave a partial record behind.

Both pools have the same interface: ``submit(job) -> concurrent.futures.Future`` of a result dict,
``n_workers``, ``close()``, and work as context managers.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import multiprocessing.connection as mpc
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from kernelwright.errors import UsageError


# --- what every worker runs ---------------------------------------------------------------------------------------
def make_job(reference: str, reference_source: str, candidate_source: str, *, name: str, config: dict) -> dict:
    """A job: the problem (path and text), the candidate's source, its label and the :class:`EvalConfig` fields
    (scalars only)."""
    return {"reference": os.path.abspath(reference), "reference_source": reference_source,
            "candidate": candidate_source, "name": name, "config": dict(config)}


def _reference_path(job: dict) -> str:
    """The problem file to evaluate against: the job's path when it holds the same text (same machine), else the
    text written once to a private folder (a Ray worker on another host)."""
    path, text = job["reference"], job["reference_source"]
    try:
        if Path(path).read_text() == text:
            return path
    except OSError:
        pass
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "kw-search-references" / digest
    target = folder / Path(path).name
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, target)
    return str(target)


_DEVICE_NAME: dict[str, str] = {}


def _device_name(device: str) -> str:
    """"cpu", or the GPU's name ("NVIDIA H200") for the archive; asked of nvidia-smi so that this process, which
    only hands jobs to the evaluator's own workers, never holds a CUDA context of its own."""
    if device not in _DEVICE_NAME:
        name = "cpu"
        if device == "cuda":
            name = "cuda"
            gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", gpu],
                                     capture_output=True, text=True, timeout=20)
                if out.returncode == 0 and out.stdout.strip():
                    name = out.stdout.strip().splitlines()[0]
            except (OSError, subprocess.SubprocessError):
                pass
        _DEVICE_NAME[device] = name
    return _DEVICE_NAME[device]


def run_job(job: dict) -> dict:
    """Evaluate one candidate: ``kernelwright.eval.evaluate(reference, source, config=EvalConfig(**config))``.

    Returns ``{"verdict": Verdict.to_dict(), "device_name", "worker", "wall_s"}``; never raises for a bad
    candidate (the verdict says what went wrong)."""
    from kernelwright.eval import EvalConfig, evaluate

    t0 = time.perf_counter()
    cfg = EvalConfig(**job["config"])
    v = evaluate(_reference_path(job), job["candidate"], config=cfg, name=job.get("name"))
    return {"verdict": v.to_dict(), "device_name": _device_name(v.device), "wall_s": time.perf_counter() - t0,
            "worker": f"{socket.gethostname()}:{os.getpid()}"}


def crash_result(job: dict, detail: str, worker: str = "", wall_s: float = 0.0) -> dict:
    """The result of a job whose worker died before a verdict (not the candidate's doing, as far as anyone
    knows: the candidate itself runs in a sandbox process of its own)."""
    return {"verdict": {"problem": job["reference"], "candidate": job.get("name") or "<source>",
                        "device": job["config"].get("device"), "loaded": False, "compiled": False,
                        "correct": False, "passed": False, "speedup_eager": None, "speedup_compile": None,
                        "category": "crash", "flags": [], "checks": [], "times": {},
                        "reason": f"the evaluation worker died before a verdict ({detail})",
                        "details": {"infrastructure": True}},
            "device_name": "", "worker": worker, "wall_s": wall_s}


class WorkerDied(RuntimeError):
    pass


# --- the dispatcher both pools share ------------------------------------------------------------------------------
class _Dispatch:
    """One thread per worker slot takes jobs from a shared queue, runs them on its slot and resolves futures."""

    def __init__(self, slots: list, retries: int):
        self.slots, self.retries = slots, retries
        self.jobs: queue.Queue = queue.Queue()
        self.closed = False
        self.threads = [threading.Thread(target=self._serve, args=(s,), name=f"kw-pool-{i}", daemon=True)
                        for i, s in enumerate(slots)]
        for t in self.threads:
            t.start()

    @property
    def n_workers(self) -> int:
        return len(self.slots)

    def submit(self, job: dict) -> cf.Future:
        if self.closed:
            raise RuntimeError("the pool is closed")
        fut: cf.Future = cf.Future()
        self.jobs.put((job, fut))
        return fut

    def _serve(self, slot) -> None:
        while True:
            item = self.jobs.get()
            if item is None:
                return
            job, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            t0 = time.perf_counter()
            for attempt in range(self.retries + 1):
                try:
                    result = slot.run(job)
                    break
                except WorkerDied as e:
                    if self.closed or attempt == self.retries:
                        result = crash_result(job, str(e), slot.name, time.perf_counter() - t0)
                        break
                except BaseException as e:  # a bug in the worker's harness: report, keep serving
                    result = crash_result(job, f"{type(e).__name__}: {e}", slot.name, time.perf_counter() - t0)
                    result["verdict"]["details"]["traceback"] = traceback.format_exc()[-2000:]
                    break
            fut.set_result(result)

    def close(self) -> None:
        self.closed = True
        while True:  # pending jobs are cancelled
            try:
                item = self.jobs.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].cancel()
        for _ in self.threads:
            self.jobs.put(None)


# --- local processes ----------------------------------------------------------------------------------------------
def serve(conn) -> None:
    """A local worker's loop (``python -m kernelwright.search._worker FD``): read a job, send its result, until
    the parent closes the connection."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = run_job(job)
        except (KeyboardInterrupt, SystemExit):
            raise  # stopped by the pool: the evaluator's own cleanup has run (its worker killed)
        except BaseException as e:
            result = crash_result(job, f"{type(e).__name__}: {e}")
            result["verdict"]["details"]["traceback"] = traceback.format_exc()[-2000:]
        try:
            conn.send(result)
        except (BrokenPipeError, OSError):
            return


class _LocalSlot:
    """One worker process, started as ``python -m kernelwright.search._worker`` (a fresh interpreter that never
    re-runs the caller's main script, as multiprocessing's spawn would) and talking over a socket pair (its
    stdout stays free for whatever the evaluator prints)."""

    def __init__(self, name: str, env: dict):
        self.name, self.env = name, env
        self.proc: subprocess.Popen | None = None
        self.conn = None
        self.lock = threading.Lock()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelwright.search._worker", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.conn = mpc.Connection(ours.detach())

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def _died(self, why: str = "") -> WorkerDied:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # being stopped by close()
            return WorkerDied(f"worker {self.name} (pid {self.proc.pid}) was stopped{why}")
        return WorkerDied(f"worker {self.name} (pid {self.proc.pid}) exited with code {code}{why}")

    def run(self, job: dict) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
        try:
            self.conn.send(job)
            while True:
                if self.conn.poll(0.2):
                    return self.conn.recv()
                if self.proc.poll() is not None:
                    raise self._died()
        except (EOFError, OSError) as e:
            raise self._died(f" ({type(e).__name__})") from None

    def stop(self, timeout: float = 3.0) -> None:
        """An idle worker leaves when its connection closes; a busy one is asked to stop (SIGTERM: the evaluator
        kills the candidate's process on the way out), then killed."""
        if self.proc is None:
            return
        try:
            self.conn.close()
        except OSError:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.proc.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                self.proc.send_signal(sig)
        self.proc.wait(timeout)


def default_workers(device: str) -> int:
    if device == "cuda":
        import torch

        return max(1, torch.cuda.device_count())
    return max(1, os.cpu_count() or 1)


class LocalPool:
    """Worker processes on this machine.

    Parameters
    ----------
    workers : int, optional
        Default: one per GPU (``device="cuda"``), else one per CPU core.
    device : {"cpu", "cuda"}
        On CUDA, worker ``i`` sees only GPU ``gpus[i % len(gpus)]`` (default: all visible GPUs).
    retries : int
        Times a job is retried on a fresh worker after its worker died.
    """

    def __init__(self, workers: int | None = None, *, device: str = "cpu", gpus: list[int] | None = None,
                 retries: int = 1):
        if workers is not None and workers < 1:
            raise UsageError(f"workers: expected at least 1, got {workers}")
        n = workers or default_workers(device)
        if device == "cuda":
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = gpus if gpus is not None else (
                [g.strip() for g in visible.split(",") if g.strip()] if visible else list(range(default_workers(
                    "cuda"))))
            envs = [{"CUDA_VISIBLE_DEVICES": str(ids[i % len(ids)]), "KW_DEVICE": "cuda"} for i in range(n)]
        else:
            envs = [{"KW_DEVICE": "cpu"} for _ in range(n)]
        self.device = device
        self.slots = [_LocalSlot(f"local{i}", envs[i]) for i in range(n)]
        self._dispatch = _Dispatch(self.slots, retries)

    @property
    def n_workers(self) -> int:
        return len(self.slots)

    def describe(self) -> str:
        return f"{self.n_workers} local worker(s) on {self.device}"

    def worker_pids(self) -> list[int | None]:
        return [s.pid for s in self.slots]

    def submit(self, job: dict) -> cf.Future:
        return self._dispatch.submit(job)

    def close(self) -> None:
        self._dispatch.close()
        for s in self.slots:
            s.stop()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- Ray ----------------------------------------------------------------------------------------------------------
class EvalActor:
    """A Ray actor running :func:`run_job` (one GPU, or one CPU on a CPU-only cluster)."""

    def __init__(self, env: dict):
        os.environ.update(env)

    def run(self, job: dict) -> dict:
        return run_job(job)

    def pid(self) -> int:
        return os.getpid()


class _RaySlot:
    def __init__(self, name: str, ray, actor_cls, env: dict):
        self.name, self.ray, self.cls, self.env = name, ray, actor_cls, env
        self.actor = self.cls.remote(env)

    def run(self, job: dict) -> dict:
        ray = self.ray
        try:
            return ray.get(self.actor.run.remote(job))
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
            self.actor = self.cls.remote(self.env)  # a fresh actor for the retry and what follows
            raise WorkerDied(f"Ray actor {self.name} died: {type(e).__name__}") from None

    def stop(self) -> None:
        try:
            self.ray.kill(self.actor)
        except Exception:
            pass


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--ray: the ray package is not installed (pip install ray)") from None
    return ray


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """A clear error, fast, when nothing listens at ``address`` (``host:port`` or ``ray://host:port``)."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--ray: expected HOST:PORT, ray://HOST:PORT, auto or local, got {address!r}")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e}); start one with "
                         "`ray start --head` or give the head node's address") from None


class RayPool:
    """The evaluation workers as Ray actors.

    Parameters
    ----------
    address : str or None
        A running cluster (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``), ``"local"`` to start a private
        instance on this machine, or None to use the instance this process already initialised.
    device : {"cpu", "cuda"}
        ``cuda``: each actor takes one GPU (``num_gpus=1``); ``cpu``: one CPU.
    workers : int, optional
        Default: the cluster's GPUs (``cuda``) or CPUs (``cpu``).
    init_kwargs : dict, optional
        More arguments for ``ray.init`` (``num_cpus=2`` for a local instance in CI, ...).
    """

    def __init__(self, address: str | None = "auto", *, device: str = "cpu", workers: int | None = None,
                 retries: int = 1, init_kwargs: dict | None = None, connect_timeout_s: float = 5.0):
        ray = _import_ray()
        self.ray, self.device = ray, device
        self._started = False
        if address is not None:
            check_ray_address(address, connect_timeout_s)
        if not ray.is_initialized():  # else: this process already joined a cluster (ray.init can run once)
            kwargs = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
            if address not in (None, "local"):
                kwargs["address"] = address
            try:
                ray.init(**kwargs)
            except Exception as e:
                raise UsageError(f"--ray {address}: cannot join the Ray cluster: {type(e).__name__}: {e}") from None
            self._started = True
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
        if device == "cuda":
            if gpus == 0:
                self.close()
                raise UsageError(f"--ray {address}: the cluster has no GPUs (resources: {resources})")
            n, opts = workers or gpus, {"num_gpus": 1, "num_cpus": 1}
        else:
            n, opts = workers or max(1, cpus), {"num_gpus": 0, "num_cpus": 1}
        self.address = address
        actor_cls = ray.remote(EvalActor).options(**opts)
        env = {"KW_DEVICE": device}
        self.slots = [_RaySlot(f"ray{i}", ray, actor_cls, env) for i in range(n)]
        self._dispatch = _Dispatch(self.slots, retries)

    @property
    def n_workers(self) -> int:
        return len(self.slots)

    def describe(self) -> str:
        return f"{self.n_workers} Ray actor(s) on {self.device} ({self.address or 'this process’s Ray instance'})"

    def submit(self, job: dict) -> cf.Future:
        return self._dispatch.submit(job)

    def close(self) -> None:
        if hasattr(self, "_dispatch"):
            self._dispatch.close()
        for s in getattr(self, "slots", []):
            s.stop()
        if self._started:
            self.ray.shutdown()
            self._started = False

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
