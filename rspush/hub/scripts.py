"""The Lua scripts of the store (``lua/*.lua``) and, one function per script, the KEYS and
ARGV of a call built from named values.

Each script binds KEYS and ARGV to named locals at its top, with a comment per argument; the
functions here name every key and argument the same way, in the same order (a unit test
compares the two), so positions live in the scripts' headers only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from .ingest import IngestPlan, SeedPlan
from .keys import TopicKeys, WebSubKeys

FIELD_SEPARATOR = "\0"
"""Between the fields of an append's changes, packed as one argument: XML 1.0 text (so every
posted entry lxml parsed), URIs and JSON output never contain NUL, so the script splits on it
with plain ``string.find``. One join here and a split there cost a fraction of encoding and
decoding the same strings as JSON (a 100-change append: 15 µs against 200 µs to pack, and
~0.35 ms less in the script)."""


RECORD_FIELDS = 7
"""Strings per change in an append's packed argument (``lua/append.lua`` names them)."""


def change_mark(time_us: int, change: str, entry_xml: str) -> str:
    """What ``latest`` keeps per URI to recognise a re-posted change: its time, its type and
    the SHA-1 of its entry XML (the same hex digest Lua's ``redis.sha1hex`` gives). Computed
    here rather than in the script, where it cost ~2 µs per change of the server's time."""
    return f"{time_us} {change} {hashlib.sha1(entry_xml.encode()).hexdigest()}"


def load(name: str, *, server_now: bool = False, step_guards: bool = False) -> str:
    """The text of ``lua/{name}.lua``, after ``lua/server_now.lua`` if it stamps times and
    ``lua/step_guards.lua`` if it writes a request's step (the checkpoint and idempotency
    checks append and seed share)."""
    text = (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    preludes = [
        p for p, wanted in (("server_now", server_now), ("step_guards", step_guards)) if wanted
    ]
    return "".join(load(prelude) for prelude in preludes) + text


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


@dataclass(frozen=True, slots=True)
class CheckpointSet:
    """A bridge's checkpoint, set in the same script call as its changes (or its seed), and
    only if the checkpoint is still ``expected`` (None: no checkpoint yet)."""

    expected: str | None
    value: str


def _checkpoint(k: TopicKeys, checkpoint: CheckpointSet | None) -> tuple[str, dict[str, str]]:
    """The checkpoint key (the meta key, never written, when unused) and the named ARGV."""
    if checkpoint is None:
        return k.meta, {"has_checkpoint": "0", "checkpoint_expected": "", "checkpoint_value": ""}
    return k.bridge_checkpoint, {
        "has_checkpoint": "1",
        "checkpoint_expected": checkpoint.expected or "",
        "checkpoint_value": checkpoint.value,
    }


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
    checkpoint: CheckpointSet | None = None,
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key, source)
    checkpoint_key, checkpoint_args = _checkpoint(k, checkpoint)
    # RECORD_FIELDS strings per change, in the script's order.
    packed = FIELD_SEPARATOR.join(
        [
            field
            for r in plan.records
            for field in (
                str(r.time_us),
                r.loc,
                r.change,
                change_mark(r.time_us, r.change, r.entry_xml),
                r.entry_xml,
                r.state_xml or "",
                r.entry_json,
            )
        ]
    )
    if plan.records and packed.count(FIELD_SEPARATOR) != len(plan.records) * RECORD_FIELDS - 1:
        # Not reachable from a parsed document (see FIELD_SEPARATOR); refused rather than
        # split wrongly.
        raise ValueError("a change holds a NUL character, which no Change List entry can")
    return Call(
        {
            "stream": k.stream,
            "meta": k.meta,
            "state": k.state,
            "idem": idem,
            "latest": k.latest,
            "checkpoint": checkpoint_key,
        },
        {
            "count": len(plan.records),
            "has_idem": has_idem,
            "idem_ttl": idempotency_ttl_s,
            "epoch_candidate": epoch_candidate,
            "now_us": now_us,
            "body_sha256": body_sha256,
            **checkpoint_args,
            "packed": packed,
        },
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
    checkpoint: CheckpointSet | None = None,
) -> Call:
    has_idem, idem = _idempotency(k, idempotency_key, source)
    checkpoint_key, checkpoint_args = _checkpoint(k, checkpoint)
    pairs: list[Any] = []
    for loc, xml in plan.state.items():
        pairs += [loc, xml]
    return Call(
        {"meta": k.meta, "state": k.state, "idem": idem, "checkpoint": checkpoint_key},
        {
            "has_idem": has_idem,
            "idem_ttl": idempotency_ttl_s,
            "epoch_candidate": epoch_candidate,
            "now_us": now_us,
            "at_us": plan.at_us,
            "body_sha256": body_sha256,
            **checkpoint_args,
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
    framework_maxlen: int = 0,
    closed_loc: str = "",
    open_loc: str = "",
    index_loc: str = "",
) -> Call:
    return Call(
        {
            "meta": k.meta,
            "closed": k.closed,
            "closed_n": k.closed_list(number),
            "lease": k.lease,
            "framework": k.framework,
            "stream": k.stream,
        },
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
            "framework_maxlen": framework_maxlen,
            "closed_loc": closed_loc,
            "open_loc": open_loc,
            "index_loc": index_loc,
        },
    )


def framework_resourcelist_call(
    k: TopicKeys,
    *,
    now_us: int,
    interval_us: int,
    framework_maxlen: int,
    list_loc: str,
    part_loc: str,
    max_entries: int,
) -> Call:
    return Call(
        {"meta": k.meta, "state": k.state, "framework": k.framework},
        {
            "now_us": now_us,
            "interval_us": interval_us,
            "framework_maxlen": framework_maxlen,
            "list_loc": list_loc,
            "part_loc": part_loc,
            "max_entries": max_entries,
        },
    )


def framework_document_call(
    k: TopicKeys,
    *,
    field: str,
    digest: str,
    first_change: str,
    now_us: int,
    framework_maxlen: int,
    loc: str,
    capability: str,
) -> Call:
    return Call(
        {"meta": k.meta, "framework": k.framework},
        {
            "field": field,
            "digest": digest,
            "first_change": first_change,
            "now_us": now_us,
            "framework_maxlen": framework_maxlen,
            "loc": loc,
            "capability": capability,
        },
    )


def snapshot_call(k: TopicKeys) -> Call:
    return Call({"meta": k.meta, "state": k.state}, {})


def lease_call(k: TopicKeys, *, token: str, ttl_ms: int, key: str | None = None) -> Call:
    """The rotation lease, or another lease of the topic (``key``: a bridge's); ``ttl_ms`` -1
    releases it."""
    return Call({"lease": key or k.lease}, {"token": token, "ttl_ms": ttl_ms})


def listed_call(k: TopicKeys, *, after: str, count: int | None) -> Call:
    """Up to ``count`` (None: all) of the stream's entries after ``after``, as a list needs
    them (their XML in one string)."""
    return Call({"stream": k.stream}, {"after": after, "count": count or 0})


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
