"""Merge kernelwright tune caches: every ``<space>.json`` under ``SRC/tune`` into ``DST/tune``, entry by entry,
the newer ``tuned_at`` winning where both hold a key (a whole-file copy would put back the older configs of one
cache over the other's re-tuned ones, as unpacking two tune.tgz in a row did).

    python benchmarks/merge_tune.py SRC_CACHE_DIR DST_CACHE_DIR
"""

from __future__ import annotations

import json
import pathlib
import sys


def merge(src: pathlib.Path, dst: pathlib.Path) -> dict[str, int]:
    """Merge ``src/tune/*.json`` into ``dst/tune``; returns the entries taken from src per space file."""
    taken = {}
    (dst / "tune").mkdir(parents=True, exist_ok=True)
    for f in sorted((src / "tune").glob("*.json")):
        new = json.loads(f.read_text())
        out = dst / "tune" / f.name
        if not out.exists():
            out.write_text(f.read_text())
            taken[f.name] = len(new.get("entries", {}))
            continue
        old = json.loads(out.read_text())
        if old.get("env") != new.get("env"):
            print(f"{f.name}: environments differ ({old.get('env')} / {new.get('env')}); kept {out}", file=sys.stderr)
            continue
        entries = old.setdefault("entries", {})
        n = 0
        for key, entry in new.get("entries", {}).items():
            if key not in entries or entry.get("tuned_at", "") > entries[key].get("tuned_at", ""):
                entries[key] = entry
                n += 1
        out.write_text(json.dumps(old, indent=1, sort_keys=True))
        taken[f.name] = n
    return taken


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    for name, n in merge(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])).items():
        print(f"merge_tune: {name}: {n} entries from {sys.argv[1]}")
