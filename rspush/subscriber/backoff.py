"""Reconnect delays: exponential with full jitter (pure; the caller sleeps).

Many Destinations reconnecting to a restarted hub at the same instant would stampede it;
"full jitter" spreads them over the whole window (AWS Architecture Blog, "Exponential Backoff
and Jitter", 2015).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.5
    maximum: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next(self) -> float:
        # The exponent stops growing once past the cap (2**1024 overflows a float).
        ceiling = min(self.maximum, self.initial * 2 ** min(self.attempts, 60))
        self.attempts += 1
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempts = 0
