"""The Lua scripts of the store (``lua/*.lua``) and, one function per script, the KEYS and
ARGV of a call built from named values.

Each script binds KEYS and ARGV to named locals at its top, with a comment per argument; the
functions here list the same names in the same order, so positions live in these two places
only.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from .ingest import IngestPlan, SeedPlan
from .keys import TopicKeys


def load(name: str, *, server_now: bool = False) -> str:
    """The text of ``lua/{name}.lua``, after ``lua/server_now.lua`` if it stamps times."""
    text = (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    return load("server_now") + text if server_now else text


@dataclass(frozen=True, slots=True)
class Call:
    """The KEYS and ARGV of one script call, in the order the script binds them."""

    keys: list[str]
    args: list[Any]


def _idempotency(k: TopicKeys, key: str | None) -> tuple[str, str]:
    """has_idem and the key holding the receipt (the meta key, never written, when unused)."""
    return ("1", k.idempotency(key)) if key else ("0", k.meta)


def append_call(
    k: TopicKeys,
    plan: IngestPlan,
    *,
    idempotency_key: str | None,
    idempotency_ttl_s: int,
    epoch_candidate: str,
    now_us: int,
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key)
    args: list[Any] = [len(plan.records), has_idem, idempotency_ttl_s, epoch_candidate, now_us]
    for record in plan.records:  # RECORD_WIDTH values each, from FIRST_RECORD
        args += [
            record.time_us,
            record.loc,
            record.change,
            record.entry_xml,
            record.state_xml or "",
            record.entry_json,
        ]
    return Call([k.stream, k.meta, k.state, idem], args)


def seed_call(
    k: TopicKeys,
    plan: SeedPlan,
    *,
    idempotency_key: str | None,
    idempotency_ttl_s: int,
    epoch_candidate: str,
    now_us: int,
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key)
    args: list[Any] = [has_idem, idempotency_ttl_s, epoch_candidate, now_us, plan.at_us]
    for loc, xml in plan.state.items():  # pairs from FIRST_PAIR
        args += [loc, xml]
    return Call([k.meta, k.state, idem], args)


def rotate_call(
    k: TopicKeys,
    *,
    number: int,
    token: str,
    expected_open_start: str,
    new_open_start: str,
    until_us: int,
    closed_count: int,
    xml: bytes,
    record: str,
    now_us: int,
) -> Call:
    return Call(
        [k.meta, k.closed, k.closed_list(number), k.lease],
        [
            token,
            expected_open_start,
            new_open_start,
            until_us,
            closed_count,
            xml,
            record,
            number,
            now_us,
        ],
    )


def snapshot_call(k: TopicKeys) -> Call:
    return Call([k.meta, k.state], [])


def lease_call(k: TopicKeys, *, token: str, ttl_ms: int) -> Call:
    return Call([k.lease], [token, ttl_ms])
