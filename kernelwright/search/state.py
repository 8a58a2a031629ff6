"""What proposers and the search loop share: a proposal, an evaluated candidate, and the search's state."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Proposal:
    """A candidate to evaluate. ``source`` is ``None`` when a proposer tried and produced nothing usable (an LLM
    reply without code): it still counts as an attempt and its ``note`` is fed back."""

    source: str | None
    label: str
    origin: str
    """the proposer's name: ``builtin`` or ``llm``"""
    plan: dict | None = None
    """the built-in proposer's substitution plan (see :mod:`kernelwright.search.rewrite`)"""
    note: str = ""
    reply: str = ""
    """an LLM's whole reply"""

    @property
    def digest(self) -> str:
        return hashlib.sha256((self.source or "").encode()).hexdigest()[:16]


def fitness(verdict: dict) -> float:
    """Verified speedup over eager PyTorch: ``speedup_eager`` of a candidate that passed (correct, timing
    believable), else 0."""
    if not verdict.get("passed"):
        return 0.0
    s = verdict.get("speedup_eager")
    return float(s) if isinstance(s, int | float) and s > 0 else 0.0


@dataclass
class Evaluated:
    index: int
    proposal: Proposal
    verdict: dict
    fitness: float
    wall_s: float = 0.0
    worker: str = ""
    device_name: str = ""
    archive_id: int | None = None

    @property
    def passed(self) -> bool:
        return bool(self.verdict.get("passed"))


@dataclass
class SearchState:
    reference_path: str
    reference_source: str
    device: str
    population_size: int = 8
    history: list[Evaluated] = field(default_factory=list)
    notes: list[tuple[Proposal, str]] = field(default_factory=list)
    """attempts that produced no candidate, with why"""

    def population(self, k: int | None = None) -> list[Evaluated]:
        """The ``k`` (default ``population_size``) fittest candidates that passed, best first (ties: the
        earlier)."""
        ok = [e for e in self.history if e.fitness > 0]
        return sorted(ok, key=lambda e: (-e.fitness, e.index))[:k or self.population_size]

    @property
    def best(self) -> Evaluated | None:
        top = self.population(1)
        return top[0] if top else None

    def by_origin(self, origin: str) -> list[Evaluated]:
        return [e for e in self.history if e.proposal.origin == origin]
