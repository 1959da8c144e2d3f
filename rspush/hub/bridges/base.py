"""Provisional: the bridge contract, until the bridge framework lands."""

from __future__ import annotations

from dataclasses import dataclass

from rspush.resourcesync import Entry


@dataclass(frozen=True, slots=True)
class BridgeStep:
    changes: list[Entry]
    checkpoint: str
    baseline: bool = False
    more: bool = False
