"""Where a run came from: device, driver, library versions, git commit, host."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path


def git_state(path: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout; ``$KW_GIT_COMMIT`` wins when set: a tree copied to a remote GPU box may
    carry a ``.git`` whose HEAD is older than the files that travelled with it."""
    if os.environ.get("KW_GIT_COMMIT"):
        return os.environ["KW_GIT_COMMIT"], None
    cwd = str(path or Path(__file__).resolve().parents[2])
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=10)
        commit = head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True,
            timeout=10,
        ).stdout.strip()
        dirty = bool(dirty) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return commit, dirty


def provenance() -> dict:
    import torch

    from kernelwright.harness import telemetry
    from kernelwright.runtime import device_facts

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    facts = device_facts()
    commit, dirty = git_state()
    return {
        "device": facts["device"], "device_kind": facts["kind"], "driver": facts["driver"],
        "capability": facts["capability"], "torch": torch.__version__, "triton": triton_version,
        "python": platform.python_version(), "git_commit": commit, "git_dirty": dirty,
        "host": socket.gethostname(), "extra": {"facts": facts, "clocks_at_start": telemetry.read()},
    }
