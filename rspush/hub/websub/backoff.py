"""The retry schedule of failed deliveries: exponential backoff with full jitter, and the
horizon past which a subscription is given up (WebSub §7: a hub "SHOULD retry notifications
… up to a self-imposed limit")."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float
    max_s: float
    horizon_s: float

    def ceiling(self, attempt: int) -> float:
        """The longest wait before retry ``attempt`` (1 for the first retry)."""
        return min(self.max_s, self.base_s * 2.0 ** min(max(attempt - 1, 0), 62))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A wait drawn uniformly in [ceiling/2, ceiling]: jitter spreads the retries of many
        subscriptions to one recovering host, half the ceiling keeps a floor."""
        ceiling = self.ceiling(attempt)
        return (rng or random).uniform(ceiling / 2, ceiling)

    def given_up(self, failing_for_s: float) -> bool:
        return failing_for_s >= self.horizon_s
