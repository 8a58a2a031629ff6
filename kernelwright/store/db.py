"""Results in SQLite: one ``runs`` row per invocation (its provenance), one ``rows`` row per timed kernel.

Each row is committed the moment it is measured, so an interrupted sweep keeps every finished row; runs only
ever append. WAL mode and a busy timeout let several writers (parallel sweeps) share one file.
The path comes from ``--db``, else ``KW_DB``, else ``kernelwright.db`` in the current folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.errors import UsageError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    command TEXT,
    device TEXT, device_kind TEXT, driver TEXT, capability TEXT,
    torch TEXT, triton TEXT, python TEXT,
    git_commit TEXT, git_dirty INTEGER,
    host TEXT,
    ceilings TEXT,
    extra TEXT
);
CREATE TABLE IF NOT EXISTS rows (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    family TEXT NOT NULL, variant TEXT NOT NULL, role TEXT NOT NULL, backend TEXT,
    size TEXT NOT NULL, dtype TEXT NOT NULL, numel INTEGER,
    median_ms REAL, iqr_ms REAL, min_ms REAL, n_samples INTEGER, samples TEXT, mode TEXT, settled INTEGER,
    flops REAL, bytes REAL, tflops REAL, tbps REAL, pct_roofline REAL, bound TEXT,
    speedup_vs_baseline REAL, speedup_vs_below REAL,
    correct INTEGER, max_abs REAL, rel_norm REAL,
    throttled INTEGER, telemetry TEXT, note TEXT
);
CREATE INDEX IF NOT EXISTS rows_run ON rows(run_id);
"""

ROW_FIELDS = (
    "family", "variant", "role", "backend", "size", "dtype", "numel", "median_ms", "iqr_ms", "min_ms",
    "n_samples", "samples", "mode", "settled", "flops", "bytes", "tflops", "tbps", "pct_roofline", "bound",
    "speedup_vs_baseline", "speedup_vs_below", "correct", "max_abs", "rel_norm", "throttled", "telemetry", "note",
)


def default_path() -> str:
    return os.environ.get("KW_DB") or "kernelwright.db"


def check_writable(path: str) -> None:
    """Fail before any work when the results file cannot be created or written."""
    p = Path(path)
    if p.exists():
        if p.is_dir() or not os.access(p, os.W_OK):
            raise UsageError(f"db: results path {path!r} is not a writable file")
        return
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"db: folder {str(parent)!r} for the results file does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"db: folder {str(parent)!r} for the results file is not writable")


@dataclass
class Store:
    path: str = field(default_factory=default_path)

    def __post_init__(self):
        check_writable(self.path)
        self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA busy_timeout=30000")
        self.conn.executescript(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    # --- writing -------------------------------------------------------------------------------------------
    def start_run(self, provenance: dict, command: str = "") -> int:
        cols = ["device", "device_kind", "driver", "capability", "torch", "triton", "python", "git_commit",
                "git_dirty", "host", "ceilings", "extra"]
        vals = [_sql(provenance.get(c)) for c in cols]
        with self.conn:
            cur = self.conn.execute(
                f"INSERT INTO runs (started_at, command, {', '.join(cols)}) "
                f"VALUES (?, ?, {', '.join('?' * len(cols))})",
                [_now(), command, *vals],
            )
        return int(cur.lastrowid)

    def add_row(self, run_id: int, row: dict) -> int:
        vals = [_sql(row.get(f)) for f in ROW_FIELDS]
        with self.conn:
            cur = self.conn.execute(
                f"INSERT INTO rows (run_id, {', '.join(ROW_FIELDS)}) VALUES (?, {', '.join('?' * len(ROW_FIELDS))})",
                [run_id, *vals],
            )
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        with self.conn:
            self.conn.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (_now(), status, run_id))

    # --- reading -------------------------------------------------------------------------------------------
    def runs(self, limit: int = 50) -> list[dict]:
        q = """SELECT runs.*, (SELECT COUNT(*) FROM rows WHERE rows.run_id = runs.id) AS n_rows
               FROM runs ORDER BY id DESC LIMIT ?"""
        return [_decode(dict(r)) for r in self.conn.execute(q, (limit,))]

    def run(self, run_id: int) -> dict:
        r = self.conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if r is None:
            raise UsageError(f"run: no run with id {run_id} in {self.path}")
        return _decode(dict(r))

    def rows(self, run_id: int | None = None, family: str | None = None) -> list[dict]:
        q, args = "SELECT * FROM rows WHERE 1=1", []
        if run_id is not None:
            q += " AND run_id=?"
            args.append(run_id)
        if family is not None:
            q += " AND family=?"
            args.append(family)
        return [_decode(dict(r)) for r in self.conn.execute(q + " ORDER BY id", args)]

    def latest_run_id(self, device_kind: str | None = None) -> int | None:
        q = "SELECT id FROM runs WHERE EXISTS (SELECT 1 FROM rows WHERE rows.run_id=runs.id)"
        args = []
        if device_kind:
            q += " AND device_kind=?"
            args.append(device_kind)
        r = self.conn.execute(q + " ORDER BY id DESC LIMIT 1", args).fetchone()
        return None if r is None else int(r[0])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _sql(v):
    if isinstance(v, dict | list | tuple):
        return json.dumps(v)
    if isinstance(v, bool):
        return int(v)
    return v


_JSON_COLS = ("samples", "telemetry", "ceilings", "extra")


def _decode(d: dict) -> dict:
    for k in _JSON_COLS:
        if isinstance(d.get(k), str):
            try:
                d[k] = json.loads(d[k])
            except ValueError:
                pass
    return d
