"""The Lua scripts of the store (``lua/*.lua``) and, one function per script, the KEYS and
ARGV of a call built from named values.

Each script binds KEYS and ARGV to named locals at its top, with a comment per argument; the
functions here name every key and argument the same way, in the same order (a unit test
compares the two), so positions live in the scripts' headers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from .ingest import IngestPlan, SeedPlan
from .keys import TopicKeys, WebSubKeys


def load(name: str, *, server_now: bool = False) -> str:
    """The text of ``lua/{name}.lua``, after ``lua/server_now.lua`` if it stamps times."""
    text = (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    return load("server_now") + text if server_now else text


@dataclass(frozen=True, slots=True)
class Call:
    """The KEYS and ARGV of one script call. ``keys`` and ``args`` are named as the script's
    locals and in the order it binds them; ``rest`` follows the named ARGV (repeated groups)."""

    keys: dict[str, str]
    args: dict[str, Any]
    rest: list[Any] = field(default_factory=list)

    @property
    def argv(self) -> list[Any]:
        return [*self.args.values(), *self.rest]


def _idempotency(k: TopicKeys, key: str | None, source: str) -> tuple[str, str]:
    """has_idem and the key holding the receipt (the meta key, never written, when unused).

    A key is scoped by the topic (``k``) and the Source: two Sources choosing the same key
    are two requests. The Source's name is percent-encoded so no name can reach into the
    key's part (draft-ietf-httpapi-idempotency-key-header §2.2: keys are the client's)."""
    if not key:
        return "0", k.meta
    return "1", k.idempotency(f"{quote(source, safe='')}/{key}")


def append_call(
    k: TopicKeys,
    plan: IngestPlan,
    *,
    idempotency_key: str | None,
    idempotency_ttl_s: int,
    epoch_candidate: str,
    now_us: int,
    source: str = "",
    body_sha256: str = "",
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key, source)
    records: list[Any] = []
    for record in plan.records:  # RECORD_WIDTH values each
        records += [
            record.time_us,
            record.loc,
            record.change,
            record.entry_xml,
            record.state_xml or "",
            record.entry_json,
        ]
    return Call(
        {"stream": k.stream, "meta": k.meta, "state": k.state, "idem": idem, "latest": k.latest},
        {
            "count": len(plan.records),
            "has_idem": has_idem,
            "idem_ttl": idempotency_ttl_s,
            "epoch_candidate": epoch_candidate,
            "now_us": now_us,
            "body_sha256": body_sha256,
        },
        records,
    )


def seed_call(
    k: TopicKeys,
    plan: SeedPlan,
    *,
    idempotency_key: str | None,
    idempotency_ttl_s: int,
    epoch_candidate: str,
    now_us: int,
    source: str = "",
    body_sha256: str = "",
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key, source)
    pairs: list[Any] = []
    for loc, xml in plan.state.items():
        pairs += [loc, xml]
    return Call(
        {"meta": k.meta, "state": k.state, "idem": idem},
        {
            "has_idem": has_idem,
            "idem_ttl": idempotency_ttl_s,
            "epoch_candidate": epoch_candidate,
            "now_us": now_us,
            "at_us": plan.at_us,
            "body_sha256": body_sha256,
        },
        pairs,
    )


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
        {"meta": k.meta, "closed": k.closed, "closed_n": k.closed_list(number), "lease": k.lease},
        {
            "token": token,
            "expected_open_start": expected_open_start,
            "new_open_start": new_open_start,
            "until_us": until_us,
            "closed_count": closed_count,
            "xml": xml,
            "record": record,
            "number": number,
            "now_us": now_us,
        },
    )


def snapshot_call(k: TopicKeys) -> Call:
    return Call({"meta": k.meta, "state": k.state}, {})


def lease_call(k: TopicKeys, *, token: str, ttl_ms: int) -> Call:
    return Call({"lease": k.lease}, {"token": token, "ttl_ms": ttl_ms})


def trim_call(k: TopicKeys, *, min_id: str) -> Call:
    return Call({"stream": k.stream, "meta": k.meta}, {"min_id": min_id})


def subscription_lease_call(k: WebSubKeys, subscription: str, *, token: str, ttl_ms: int) -> Call:
    """The lease script on one WebSub subscription's lease key."""
    return Call({"lease": k.lease(subscription)}, {"token": token, "ttl_ms": ttl_ms})


def cursor_call(k: WebSubKeys, subscription: str, *, token: str, cursor: str, ttl_ms: int) -> Call:
    return Call(
        {"lease": k.lease(subscription), "subs": k.subscriptions, "cursors": k.cursors},
        {"id": subscription, "token": token, "cursor": cursor, "ttl_ms": ttl_ms},
    )
