"""Re-posts and the order policy for hub-stamped times.

A change with the URI, change time and change type of the change the topic holds for that URI
(and the same entry) is a duplicate: not appended again, counted in the receipt's
``duplicates``; a post of duplicates only is ``200`` with ``accepted: 0``. Same URI and time
with another type or entry: ``409 conflicting-change``. Hub-stamped times are
``max(now, last change time + 1 µs)``: a Source's future-dated change does not lock the other
Sources out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from rspush.hub.service import restamp_time
from rspush.resourcesync import parse_document
from rspush.resourcesync.w3cdt import format_w3c_datetime, to_us
from tests.support.edge import MIRROR_1, PRIVATE, PUBLIC, TOKEN_C, edge_hub, stamped
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment

CHANGES = f"/topics/{PUBLIC}/changes"


async def stream_locs(redis_url: str, prefix: str, topic: str) -> list[str]:
    client = Redis.from_url(redis_url)
    try:
        rows = await client.xrange(f"{prefix}:{{{topic}}}:changes")
    finally:
        await client.aclose()
    return [fields[b"loc"].decode() for _, fields in rows]


async def test_reposting_a_file_with_one_change_time_keeps_one_copy(
    redis_url: str, prefix: str
) -> None:
    """The first change time equals the topic's last one: it passed the backwards check and
    was appended again on every post."""
    when = Times().next()
    body = change_fragment(
        ("http://example.com/d1", "created", when),
        ("http://example.com/d2", "created", when),
        ("http://example.com/d3", "created", when),
    )
    async with edge_hub(redis_url, prefix) as (_, http):
        first = await http.post(CHANGES, content=body, headers=auth())
        assert first.status_code == 202, first.text
        assert first.json()["accepted"] == 3 and first.json()["duplicates"] == 0
        etag = (await http.get(f"/topics/{PUBLIC}/changelist.xml")).headers["etag"]
        for _ in range(2):
            again = await http.post(CHANGES, content=body, headers=auth())
            assert again.status_code == 200, again.text
            receipt = again.json()
            assert receipt["accepted"] == 0 and receipt["duplicates"] == 3
            assert receipt["first"] is None and receipt["last"] is None
            assert receipt["replayed"] is False
        assert await stream_locs(redis_url, prefix, PUBLIC) == [
            "http://example.com/d1",
            "http://example.com/d2",
            "http://example.com/d3",
        ]
        # Nothing was written: the documents did not change.
        assert (await http.get(f"/topics/{PUBLIC}/changelist.xml")).headers["etag"] == etag


async def test_reposting_a_file_with_earlier_times_is_a_duplicate_not_a_conflict(
    redis_url: str, prefix: str
) -> None:
    times = Times()
    body = change_fragment(
        ("http://example.com/e1", "created", times.next()),
        ("http://example.com/e2", "created", times.next()),
    )
    async with edge_hub(redis_url, prefix) as (_, http):
        assert (await http.post(CHANGES, content=body, headers=auth())).status_code == 202
        again = await http.post(CHANGES, content=body, headers=auth())
        assert again.status_code == 200, again.text
        assert again.json()["duplicates"] == 2 and again.json()["accepted"] == 0
        # Duplicates and a new change: the new one is appended, the rest counted.
        later = times.next()
        mixed = change_fragment(
            ("http://example.com/e2", "created", _at(times, -1)),
            ("http://example.com/e3", "created", later),
        )
        reply = await http.post(CHANGES, content=mixed, headers=auth())
        assert reply.status_code == 202, reply.text
        assert reply.json()["accepted"] == 1 and reply.json()["duplicates"] == 1
        assert await stream_locs(redis_url, prefix, PUBLIC) == [
            "http://example.com/e1",
            "http://example.com/e2",
            "http://example.com/e3",
        ]
        # A change older than what the topic holds is still refused as going backwards.
        old = change_fragment(("http://example.com/e9", "created", _at(times, -10)))
        reply = await http.post(CHANGES, content=old, headers=auth())
        assert reply.status_code == 409 and reply.json()["error"] == "change-time-backwards"


def _at(times: Times, steps: int) -> str:
    """The time ``steps`` steps from the last one ``times`` gave."""
    return format_w3c_datetime(times.now + steps * times.step)


async def test_same_uri_and_time_with_another_type_or_content_is_a_conflict(
    redis_url: str, prefix: str
) -> None:
    when = Times().next()
    async with edge_hub(redis_url, prefix) as (_, http):
        body = change_fragment(("http://example.com/f1", "created", when))
        assert (await http.post(CHANGES, content=body, headers=auth())).status_code == 202
        other_type = change_fragment(("http://example.com/f1", "updated", when))
        reply = await http.post(CHANGES, content=other_type, headers=auth())
        assert reply.status_code == 409, reply.text
        assert reply.json()["error"] == "conflicting-change"
        assert "http://example.com/f1" in reply.json()["message"]
        length = len("http://example.com/f1")
        other_length = body.replace(
            f'length="{length}"'.encode(), f'length="{length + 1}"'.encode()
        )
        assert other_length != body
        reply = await http.post(CHANGES, content=other_length, headers=auth())
        assert reply.status_code == 409 and reply.json()["error"] == "conflicting-change"
        assert await stream_locs(redis_url, prefix, PUBLIC) == ["http://example.com/f1"]


# --- hub-stamped times ---------------------------------------------------------------------


def test_restamp_time_is_the_clock_or_just_after_the_last_change() -> None:
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert restamp_time(now, to_us(now - timedelta(seconds=5))) == now
    ahead = now + timedelta(seconds=250)
    assert restamp_time(now, to_us(ahead)) == ahead + timedelta(microseconds=1)


async def test_a_future_dated_change_does_not_lock_out_hub_stamped_posts(
    redis_url: str, prefix: str
) -> None:
    """A change dated 250 s ahead (inside the 300 s tolerance) made every post without times
    of another Source 409 until the clock caught up."""
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=250)
    async with edge_hub(redis_url, prefix) as (_, http):
        path = f"/topics/{PRIVATE}/changes"
        future = change_fragment(("http://example.com/g1", "updated", format_w3c_datetime(ahead)))
        assert (await http.post(path, content=future, headers=auth(TOKEN_A))).status_code == 202
        for n in range(2):
            reply = await http.post(
                path, content=stamped(f"http://example.com/h{n}"), headers=auth(TOKEN_C)
            )
            assert reply.status_code == 202, reply.text
        # A time a Source gave still goes through the backwards check.
        given = change_fragment(("http://example.com/g2", "updated", Times().next()))
        reply = await http.post(path, content=given, headers=auth(TOKEN_C))
        assert reply.status_code == 409 and reply.json()["error"] == "change-time-backwards"

        listed = parse_document(
            (
                await http.get(
                    f"{path.removesuffix('/changes')}/changelist.xml",
                    headers={"Authorization": f"Bearer {MIRROR_1}"},
                )
            ).content
        )
        stamps = [(e.loc, e.md.datetime) for e in listed.entries if e.md]
        assert [loc for loc, _ in stamps] == [
            "http://example.com/g1",
            "http://example.com/h0",
            "http://example.com/h1",
        ]
        # In stream order, strictly after the future-dated change.
        moments = [moment for _, moment in stamps]
        assert all(m is not None for m in moments)
        assert moments[0] == ahead
        assert moments[0] < moments[1] < moments[2]  # type: ignore[operator]


async def test_a_large_fragment_is_checked_whole_on_a_repost(redis_url: str, prefix: str) -> None:
    """More changes than the script reads or writes per call (its chunks): every one is
    found on the re-post, and one conflicting change past the first chunk refuses it all."""
    times = Times(step=timedelta(microseconds=1))
    changes = [(f"http://example.com/l{n}", "created", times.next()) for n in range(2500)]
    body = change_fragment(*changes)
    async with edge_hub(redis_url, prefix) as (_, http):
        first = await http.post(CHANGES, content=body, headers=auth())
        assert first.status_code == 202 and first.json()["accepted"] == 2500, first.text
        again = await http.post(CHANGES, content=body, headers=auth())
        assert again.status_code == 200 and again.json()["duplicates"] == 2500, again.text
        loc, _, when = changes[2100]
        conflicting = change_fragment(*changes[:2100], (loc, "deleted", when))
        reply = await http.post(CHANGES, content=conflicting, headers=auth())
        assert reply.status_code == 409 and reply.json()["error"] == "conflicting-change"
        assert "entry 2100" in reply.json()["message"]
        assert len(await stream_locs(redis_url, prefix, PUBLIC)) == 2500
