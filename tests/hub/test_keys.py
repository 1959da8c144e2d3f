"""The Redis key names of a topic: one hash slot per topic (what the Lua scripts and a Redis
Cluster need), and no collisions between prefixes and topics."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from rspush.hub.keys import TopicKeys


@pytest.mark.parametrize("topic", ["dataset1", "a", "x.y_z-9"])
def test_every_key_of_a_topic_shares_one_hash_slot(topic: str) -> None:
    keys = TopicKeys("rs", topic)
    names = [
        keys.stream,
        keys.meta,
        keys.state,
        keys.closed,
        keys.closed_list(0),
        keys.closed_list(12345),
        keys.idempotency("some-key{with}braces"),
        keys.lease,
    ]
    assert len(set(names)) == len(names)
    assert all(name.startswith(f"rs:{{{topic}}}:") for name in names)
    assert len({key_slot(name.encode()) for name in names}) == 1


def test_prefixes_and_topics_do_not_collide() -> None:
    a, b = TopicKeys("rs", "dataset1"), TopicKeys("rs2", "dataset1")
    c = TopicKeys("rs", "dataset2")
    assert a.stream != b.stream != c.stream
    assert key_slot(a.meta.encode()) == key_slot(b.meta.encode())  # the slot is the topic's
    assert a.closed_list(1) != a.closed_list(11)
