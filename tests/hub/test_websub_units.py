"""The pure parts of the WebSub hub: form parsing, leases, signatures, batching and the
notification documents, the retry schedule, the callback address policy, the channel
registry and the stored records."""

from __future__ import annotations

import hashlib
import hmac
import random
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rspush.hub.websub.addresses import AddressPolicy
from rspush.hub.websub.backoff import Backoff
from rspush.hub.websub.batches import Interval, change_notification, history_moved, interval, split
from rspush.hub.websub.callbacks import with_query
from rspush.hub.websub.channels import CHANGES, CHANNELS, resolve, topic_uri
from rspush.hub.websub.form import BadSubscription, parse_form
from rspush.hub.websub.leases import LeasePolicy, expired, expires_us
from rspush.hub.websub.records import Cursor, Subscription, subscription_id
from rspush.hub.websub.signature import ALGORITHMS, sign, verify
from rspush.protocol import Position
from rspush.resourcesync import parse_document, validate
from rspush.resourcesync.w3cdt import to_us

BASE = "http://hub.example"


def form(**fields: str) -> bytes:
    from urllib.parse import urlencode

    return urlencode({k.replace("_", ".", 1): v for k, v in fields.items()}).encode()


def test_form_parses_a_subscription_and_ignores_unknown_parameters() -> None:
    request = parse_form(
        form(
            hub_mode="subscribe",
            hub_topic=f"{BASE}/topics/t",
            hub_callback="https://cb.example/x?y=1",
            hub_lease_seconds="3600",
            hub_secret="abc",
            hub_whatever="1",
            other="2",
        )
    )
    assert request.mode == "subscribe"
    assert request.callback == "https://cb.example/x?y=1"
    assert request.lease_seconds == 3600
    assert request.secret == "abc"


@pytest.mark.parametrize(
    "fields",
    [
        {"hub_topic": "http://a/t", "hub_callback": "http://c/"},
        {"hub_mode": "publish", "hub_topic": "http://a/t", "hub_callback": "http://c/"},
        {"hub_mode": "subscribe", "hub_callback": "http://c/"},
        {"hub_mode": "subscribe", "hub_topic": "http://a/t"},
        {"hub_mode": "subscribe", "hub_topic": "http://a/t", "hub_callback": "file:///etc"},
        {"hub_mode": "subscribe", "hub_topic": "http://a/t", "hub_callback": "http://u:p@c/"},
        {"hub_mode": "subscribe", "hub_topic": "http://a/t", "hub_callback": "http://c:99999/"},
        {
            "hub_mode": "subscribe",
            "hub_topic": "http://a/t",
            "hub_callback": "http://c/",
            "hub_lease_seconds": "0",
        },
        {
            "hub_mode": "subscribe",
            "hub_topic": "http://a/t",
            "hub_callback": "http://c/",
            "hub_secret": "é" * 100,  # 200 bytes: "MUST be less than 200 bytes"
        },
    ],
)
def test_form_refuses(fields: dict[str, str]) -> None:
    with pytest.raises(BadSubscription):
        parse_form(form(**fields))


def test_form_refuses_oversized_bodies() -> None:
    with pytest.raises(BadSubscription):
        parse_form(b"a" * 20_000)


def test_lease_grant_within_bounds() -> None:
    policy = LeasePolicy(default_s=3600, min_s=300, max_s=86400)
    assert policy.grant(None) == 3600
    assert policy.grant(10) == 300
    assert policy.grant(10**9) == 86400
    assert policy.grant(1000) == 1000
    assert expires_us(1_000_000, 2) == 3_000_000
    assert not expired(3_000_000, 2_999_999)
    assert expired(3_000_000, 3_000_000)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_signature_is_the_hmac_of_the_exact_body(algorithm: str) -> None:
    body = b"<urlset/>"
    header = sign("k", body, algorithm)
    assert header == f"{algorithm}=" + hmac.new(b"k", body, getattr(hashlib, algorithm)).hexdigest()
    assert verify("k", body, header)
    assert not verify("k", body + b" ", header)
    assert not verify("other", body, header)
    assert sign("k", body).startswith("sha256=")


@given(st.lists(st.integers(1, 500), max_size=200), st.integers(1, 20), st.integers(1, 2000))
def test_split_bounds_every_batch(sizes: list[int], max_entries: int, max_bytes: int) -> None:
    lengths = list(split(sizes, max_entries=max_entries, max_bytes=max_bytes))
    assert sum(lengths) == len(sizes)
    start = 0
    for length in lengths:
        batch = sizes[start : start + length]
        assert 1 <= length <= max_entries
        assert sum(batch) <= max_bytes or length == 1
        start += length


def test_intervals_chain() -> None:
    first = interval(None, [10, 20])
    assert first == Interval(10, 20)
    second = interval(first.until_us, [25, 30])
    assert second == Interval(20, 30)
    # a change at the previous until (same microsecond) keeps the chain non-decreasing
    assert interval(30, [30]) == Interval(30, 30)


def _us(text: str) -> int:
    return to_us(datetime.fromisoformat(text).replace(tzinfo=UTC))


def test_change_notification_is_valid_and_carries_the_fragments() -> None:
    fragment = (
        "<url><loc>http://e.org/a</loc>"
        '<rs:md change="updated" datetime="2024-01-01T00:00:01Z"/></url>'
    )
    body = change_notification(
        f"{BASE}/topics/t/capabilitylist.xml",
        Interval(_us("2024-01-01T00:00:00"), _us("2024-01-01T00:00:01")),
        [fragment],
    )
    document = parse_document(body)
    assert document.md.capability == "change-notification"
    assert document.md.from_ == datetime(2024, 1, 1, tzinfo=UTC)
    assert document.md.until == datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert document.link("up") is not None
    assert [e.loc for e in document.entries] == ["http://e.org/a"]
    assert not validate(document)


def test_history_moved_names_the_archive() -> None:
    archive = f"{BASE}/topics/t/changelist-archive.xml"
    body = history_moved(
        f"{BASE}/topics/t/capabilitylist.xml",
        archive,
        Interval(_us("2024-01-01T00:00:00"), _us("2024-01-02T00:00:00")),
    )
    document = parse_document(body)
    assert not validate(document)
    assert document.md.capability == "change-notification"
    assert [e.loc for e in document.entries] == [archive]
    link = document.link("collection")
    assert link is not None and link.href == archive


def test_backoff_grows_to_the_cap_with_jitter() -> None:
    backoff = Backoff(base_s=1, max_s=60, horizon_s=3600)
    rng = random.Random(7)
    assert [backoff.ceiling(n) for n in (1, 2, 3, 7, 100)] == [1, 2, 4, 60, 60]
    for attempt in range(1, 20):
        delay = backoff.delay(attempt, rng)
        assert backoff.ceiling(attempt) / 2 <= delay <= backoff.ceiling(attempt)
    assert not backoff.given_up(3599)
    assert backoff.given_up(3600)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "fe80::1",
        "fc00::1",
        "0.0.0.0",
        "100.64.0.1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
        # IPv6 forms that carry a non-public IPv4 address reach it (NAT64, 6to4, compatible)
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::7f00:1",  # local-use NAT64 of 127.0.0.1
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
        "::127.0.0.1",  # IPv4-compatible
    ],
)
def test_address_policy_refuses_non_public_addresses(address: str) -> None:
    assert not AddressPolicy().permits(address)


def test_address_policy_allows_public_and_listed() -> None:
    assert AddressPolicy().permits("93.184.216.34")
    assert AddressPolicy().permits("2606:2800:220:1::1")
    allow = AddressPolicy.from_cidrs(["127.0.0.1/32", "10.0.0.0/8"])
    assert allow.permits("127.0.0.1")
    assert allow.permits("::ffff:127.0.0.1")
    assert allow.permits("10.9.9.9")
    assert not allow.permits("127.0.0.2")
    assert not allow.permits("192.168.0.1")
    # A public IPv4 address behind NAT64 is public; a listed one is listed in any form.
    assert AddressPolicy().permits("64:ff9b::5db8:d822")  # 93.184.216.34
    assert allow.permits("64:ff9b::a09:909")  # 10.9.9.9


def test_channel_registry_resolves_topic_uris() -> None:
    assert CHANNELS["changes"] is CHANGES
    uri = topic_uri(BASE, "t", CHANGES)
    assert uri == f"{BASE}/topics/t"
    assert resolve(BASE, uri, ["t"]) == ("t", CHANGES)
    assert resolve(BASE, f"{BASE}/topics/u", ["t"]) is None
    assert resolve(BASE, "http://elsewhere/topics/t", ["t"]) is None
    assert resolve(BASE, f"{BASE}/topics/t/capabilitylist.xml", ["t"]) is None


def test_records_round_trip() -> None:
    record = Subscription(f"{BASE}/topics/t", "t", "changes", "http://c/", 5, "s", None)
    assert Subscription.from_json(record.to_json()) == record
    assert record.id == subscription_id(f"{BASE}/topics/t", "http://c/")
    assert subscription_id("a", "b") != subscription_id("a", "c")
    cursor = Cursor(Position(5, 1), 123)
    assert Cursor.decode(cursor.encode()) == cursor
    assert Cursor.decode("0-0 -") == Cursor(Position(0, 0), None)


def test_verification_query_keeps_the_callbacks_own_query() -> None:
    assert with_query("http://c/x?a=1", {"hub.mode": "subscribe"}) == (
        "http://c/x?a=1&hub.mode=subscribe"
    )
    assert with_query("http://c/x", {"hub.challenge": "a b"}) == "http://c/x?hub.challenge=a+b"
