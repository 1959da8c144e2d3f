"""The agent's pure decisions, no event loop: which changes a Destination wants
(``subscriber.filters``), whether a change needs applying (``subscriber.decide``), whether
fetched bytes match the announcement (``subscriber.fetch.check``), and reconnect delays
(``subscriber.backoff``)."""

from __future__ import annotations

import base64
import hashlib
import random
from datetime import UTC, datetime, timedelta

import pytest

from rspush.resourcesync import Link
from rspush.resourcesync.hashes import parse_hashes
from rspush.subscriber.backoff import Backoff
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.decide import Decision, ResourceState, decide
from rspush.subscriber.fetch import check
from rspush.subscriber.filters import ChangeFilter

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
URI = "http://example.org/data/a.xml"
CONTENT = b"x1"  # base64 of its sha-256 holds '+' and '/': base64 and base64url differ
MD5 = hashlib.md5(CONTENT).digest()
SHA256 = hashlib.sha256(CONTENT).digest()


def change(
    kind: ChangeType = ChangeType.UPDATED,
    time: datetime = T0,
    *,
    uri: str = URI,
    length: int | None = None,
    hash: str | None = None,
    links: tuple[Link, ...] = (),
) -> ResourceChange:
    return ResourceChange(
        uri=uri,
        change=kind,
        time=time,
        channel=Channel.PUSH,
        length=length,
        hashes=parse_hashes(hash) if hash else (),
        links=links,
    )


def stored(
    kind: str = "updated",
    time: datetime = T0,
    *,
    length: int | None = None,
    hash: str | None = None,
) -> ResourceState:
    return ResourceState(URI, time, kind, length, hash, "data/a.xml")


def hexd(raw: bytes) -> str:
    return raw.hex()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- filters -------------------------------------------------------------------------------


def test_an_empty_filter_wants_everything() -> None:
    empty = ChangeFilter.build()

    assert not empty.active
    assert empty.wants(change())
    assert empty.wants(change(ChangeType.DELETED, uri="http://anything/else"))


def test_include_searches_the_uri_and_any_pattern_suffices() -> None:
    f = ChangeFilter.build(include=[r"\.xml$", r"/images/"])

    assert f.active
    assert f.wants(change(uri="http://example.org/data/a.xml"))
    assert f.wants(change(uri="http://example.org/images/a.png"))
    assert not f.wants(change(uri="http://example.org/data/a.json"))
    # search, not full match: a pattern may match anywhere
    assert ChangeFilter.build(include=["data"]).wants(change(uri="http://example.org/data/x"))


def test_exclude_wins_over_include() -> None:
    f = ChangeFilter.build(include=["/data/"], exclude=[r"\.tmp$", "/private/"])

    assert f.wants(change(uri="http://example.org/data/a.xml"))
    assert not f.wants(change(uri="http://example.org/data/a.tmp"))
    assert not f.wants(change(uri="http://example.org/data/private/a.xml"))
    assert not ChangeFilter.build(exclude=["a"]).wants(change(uri="http://x/a"))


@pytest.mark.parametrize(
    ("option", "include", "exclude", "pattern"),
    [("--include", ["ok", "(unclosed"], [], "(unclosed"), ("--exclude", [], ["[z-a]"], "[z-a]")],
)
def test_a_bad_regex_is_a_value_error_naming_the_option(
    option: str, include: list[str], exclude: list[str], pattern: str
) -> None:
    with pytest.raises(ValueError, match=f"^{option} ") as caught:
        ChangeFilter.build(include=include, exclude=exclude)

    assert repr(pattern) in str(caught.value)


COLLECTION = "http://example.org/collections/maps"


def test_collection_needs_a_collection_link_to_exactly_that_uri() -> None:
    f = ChangeFilter.build(collection=COLLECTION)

    assert f.wants(change(links=(Link(rel="collection", href=COLLECTION),)))
    assert not f.wants(change())
    assert not f.wants(change(links=(Link(rel="collection", href=COLLECTION + "/sub"),)))
    assert not f.wants(change(links=(Link(rel="describedby", href=COLLECTION),)))


def test_describedby_matches_a_describedby_link_by_prefix() -> None:
    f = ChangeFilter.build(describedby="http://example.org/meta/")

    assert f.wants(change(links=(Link(rel="describedby", href="http://example.org/meta/a"),)))
    assert not f.wants(change(links=(Link(rel="describedby", href="http://example.org/m/a"),)))
    assert not f.wants(change(links=(Link(rel="alternate", href="http://example.org/meta/a"),)))
    assert not f.wants(change())


DC = "http://purl.org/dc/elements/1.1/"


@pytest.mark.parametrize(
    "link",
    [
        Link(rel="profile", href=DC),  # 1.0: a rel="profile" link
        Link(rel="describedby", href="http://example.org/meta/a.xml", profile=DC),  # 1.1
        Link(rel="alternate", href="http://example.org/a.xml", profile=DC),
    ],
)
def test_profile_matches_a_profile_link_or_a_profile_attribute(link: Link) -> None:
    f = ChangeFilter.build(profile=DC)

    assert f.wants(change(links=(Link(rel="collection", href=COLLECTION), link)))


@pytest.mark.parametrize(
    "links",
    [
        (),
        (Link(rel="profile", href="http://www.openarchives.org/OAI/2.0/oai_dc/"),),
        (Link(rel="describedby", href=DC),),  # the profile URI as a plain href is no profile
        (Link(rel="describedby", href="http://x/m", profile="http://other/profile"),),
    ],
)
def test_profile_refuses_other_or_missing_profiles(links: tuple[Link, ...]) -> None:
    assert not ChangeFilter.build(profile=DC).wants(change(links=links))


def test_all_conditions_must_hold_together() -> None:
    f = ChangeFilter.build(include=["/data/"], collection=COLLECTION, profile=DC)
    both = (Link(rel="collection", href=COLLECTION), Link(rel="profile", href=DC))

    assert f.wants(change(links=both))
    assert not f.wants(change(links=both[:1]))
    assert not f.wants(change(links=both[1:]))
    assert not f.wants(change(uri="http://example.org/other/a", links=both))


# --- decide --------------------------------------------------------------------------------


def test_a_resource_not_held_is_applied() -> None:
    for kind in ChangeType:
        assert decide(None, change(kind)) is Decision.APPLY


def test_a_newer_change_is_applied() -> None:
    later = T0 + timedelta(microseconds=1)

    assert decide(stored(), change(time=later)) is Decision.APPLY
    assert decide(stored(), change(ChangeType.DELETED, later)) is Decision.APPLY


@pytest.mark.parametrize("kind", list(ChangeType))
def test_an_older_change_is_skipped(kind: ChangeType) -> None:
    earlier = T0 - timedelta(microseconds=1)

    assert decide(stored(), change(kind, earlier)) is Decision.SKIP_OLDER


@pytest.mark.parametrize("kind", list(ChangeType))
def test_the_same_time_and_type_is_a_duplicate(kind: ChangeType) -> None:
    assert decide(stored(str(kind)), change(kind)) is Decision.SKIP_DUPLICATE


def test_the_same_time_with_another_type_is_applied() -> None:
    assert decide(stored("created"), change(ChangeType.UPDATED)) is Decision.APPLY
    assert decide(stored("updated"), change(ChangeType.DELETED)) is Decision.APPLY


def test_a_tombstone_stops_a_late_older_created() -> None:
    tombstone = stored("deleted", T0)

    assert decide(tombstone, change(ChangeType.CREATED, T0 - timedelta(days=1))) is (
        Decision.SKIP_OLDER
    )
    assert decide(tombstone, change(ChangeType.DELETED, T0)) is Decision.SKIP_DUPLICATE
    # A genuinely newer creation does bring the resource back.
    assert decide(tombstone, change(ChangeType.CREATED, T0 + timedelta(seconds=1))) is (
        Decision.APPLY
    )


LATER = T0 + timedelta(hours=1)


@pytest.mark.parametrize(
    ("held", "announced"),
    [
        (f"md5:{hexd(MD5)}", f"md5:{hexd(MD5)}"),
        (f"md5:{hexd(MD5)}", f"md5:{b64(MD5)}"),
        (f"md5:{b64(MD5)}", f"md5:{hexd(MD5)}"),
        (f"md5:{hexd(MD5)}", f"MD5:{hexd(MD5).upper()}"),
        (f"sha-256:{hexd(SHA256)}", f"sha-256:{b64(SHA256)}"),
        (f"sha-256:{b64url(SHA256)}", f"sha-256:{hexd(SHA256)}"),
        (f"sha-256:{b64(SHA256)}", f"sha-256:{b64url(SHA256)}"),
        (f"sha256:{hexd(SHA256)}", f"sha256:{b64(SHA256)}"),
        # one algorithm in common is enough
        (f"md5:{hexd(MD5)} sha-256:{hexd(SHA256)}", f"sha-256:{b64(SHA256)}"),
    ],
)
def test_the_same_length_and_digest_in_any_encoding_is_same_content(
    held: str, announced: str
) -> None:
    before = stored(length=2, hash=held)

    assert decide(before, change(time=LATER, length=2, hash=announced)) is Decision.SAME_CONTENT


@pytest.mark.parametrize(
    ("held", "length", "announced"),
    [
        (f"md5:{hexd(MD5)}", 3, f"md5:{hexd(MD5)}"),  # another length
        (f"md5:{hexd(MD5)}", None, f"md5:{hexd(MD5)}"),  # no length announced
        (f"md5:{hexd(MD5)}", 2, None),  # no hash announced
        (f"md5:{hexd(MD5)}", 2, f"md5:{hexd(hashlib.md5(b'other').digest())}"),
        (f"md5:{hexd(MD5)}", 2, f"sha-256:{hexd(SHA256)}"),  # no algorithm in common
        (None, 2, f"md5:{hexd(MD5)}"),  # we hold no hash
        ("md5:not-a-digest", 2, "md5:not-a-digest"),  # unknown encodings prove nothing
    ],
)
def test_anything_less_than_a_proven_match_is_applied(
    held: str | None, length: int | None, announced: str | None
) -> None:
    before = stored(length=2, hash=held)

    assert decide(before, change(time=LATER, length=length, hash=announced)) is Decision.APPLY


def test_deletions_are_never_same_content() -> None:
    digest = f"md5:{hexd(MD5)}"
    held, gone = stored(length=2, hash=digest), stored("deleted", length=2, hash=digest)

    assert decide(held, change(ChangeType.DELETED, LATER, length=2, hash=digest)) is (
        Decision.APPLY
    )
    assert decide(gone, change(ChangeType.CREATED, LATER, length=2, hash=digest)) is (
        Decision.APPLY
    )


def test_own_sha256_matches_a_sources_sha_256() -> None:
    own = stored(length=2, hash=f"sha256:{hexd(SHA256)}")  # what Mirror records when no hash

    assert decide(own, change(time=LATER, length=2, hash=f"sha-256:{b64(SHA256)}")) is (
        Decision.SAME_CONTENT
    )


# --- fetch.check ---------------------------------------------------------------------------

DIGESTS = {"md5": MD5, "sha256": SHA256}


def test_bytes_matching_the_announcement_pass() -> None:
    assert check(change(length=2), 2, DIGESTS) is None
    assert check(change(), 2, DIGESTS) is None  # nothing announced, nothing to check


@pytest.mark.parametrize(
    "hash",
    [
        f"md5:{hexd(MD5)}",
        f"md5:{hexd(MD5).upper()}",
        f"md5:{b64(MD5)}",
        f"sha-256:{hexd(SHA256)}",
        f"sha-256:{b64(SHA256)}",
        f"sha-256:{b64url(SHA256)}",
        f"SHA256:{b64(SHA256)}",
        f"md5:{b64(MD5)} sha-256:{hexd(SHA256)}",
    ],
)
def test_hex_and_base64_digests_are_accepted(hash: str) -> None:
    assert check(change(length=2, hash=hash), 2, DIGESTS) is None


def test_a_length_mismatch_is_reported() -> None:
    problem = check(change(length=3, hash=f"md5:{hexd(MD5)}"), 2, DIGESTS)

    assert problem == "length 2 != announced 3"


@pytest.mark.parametrize(
    ("hash", "algorithm"),
    [
        (f"md5:{hexd(hashlib.md5(b'other').digest())}", "md5"),
        (f"md5:{hexd(MD5)} sha-256:{b64(hashlib.sha256(b'other').digest())}", "sha-256"),
    ],
)
def test_a_digest_mismatch_is_reported_naming_the_algorithm(hash: str, algorithm: str) -> None:
    problem = check(change(length=2, hash=hash), 2, DIGESTS)

    assert problem is not None
    assert problem.startswith(f"{algorithm} digest ")
    assert hexd(DIGESTS["sha256" if algorithm == "sha-256" else "md5"]) in problem


def test_unknown_algorithms_are_ignored() -> None:
    announced = change(length=2, hash="blake3:abcdef0123 crc32:deadbeef")

    assert check(announced, 2, DIGESTS) is None
    # ...but a known one next to them is still checked.
    wrong = f"{'00' * 16}"
    assert check(change(length=2, hash=f"blake3:abc md5:{wrong}"), 2, DIGESTS) is not None


# --- backoff -------------------------------------------------------------------------------


def test_delays_are_jittered_within_half_to_the_full_ceiling() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, rng=random.Random(7))
    ceilings = [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30]

    delays = [backoff.next() for _ in ceilings]

    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # jittered, not a fixed schedule


def test_the_jitter_comes_from_the_given_random_source() -> None:
    first = Backoff(rng=random.Random(42))
    second = Backoff(rng=random.Random(42))
    other = Backoff(rng=random.Random(43))

    a = [first.next() for _ in range(8)]
    assert a == [second.next() for _ in range(8)]
    assert a != [other.next() for _ in range(8)]


def test_the_delay_grows_exponentially_until_capped() -> None:
    backoff = Backoff(initial=1.0, maximum=10.0, rng=random.Random(1))

    for _ in range(200):
        assert backoff.next() <= 10.0
    # At the cap the window is [max/2, max]: never below half of it again.
    assert min(backoff.next() for _ in range(200)) >= 5.0


def test_reset_starts_over_at_the_initial_delay() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, rng=random.Random(3))
    for _ in range(10):
        backoff.next()

    backoff.reset()

    assert backoff.attempts == 0
    assert 0.25 <= backoff.next() <= 0.5
    assert 0.5 <= backoff.next() <= 1.0


def test_the_delay_stays_capped_however_long_the_outage() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, rng=random.Random(5))

    delays = [backoff.next() for _ in range(2000)]

    assert all(15.0 <= delay <= 30.0 for delay in delays[10:])
