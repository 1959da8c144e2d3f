"""The store's Lua scripts and their argument builders agree on every name and position, and
the store reports a failing Redis as StoreUnavailable."""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from rspush.hub import scripts
from rspush.hub.errors import Code, StoreUnavailable
from rspush.hub.ingest import ChangeRecord, IngestPlan, SeedPlan
from rspush.hub.keys import TopicKeys, WebSubKeys
from rspush.hub.store import TopicStore

K = TopicKeys("rs", "t")
RECORD = ChangeRecord(1, "http://e.org/a", "updated", "<url/>", "<url/>", "{}")
CALLS: dict[str, Callable[[], scripts.Call]] = {
    "append": lambda: scripts.append_call(
        K,
        IngestPlan([RECORD, RECORD]),
        idempotency_key="k",
        idempotency_ttl_s=60,
        epoch_candidate="e",
        now_us=2,
    ),
    "seed": lambda: scripts.seed_call(
        K,
        SeedPlan(1, {"http://e.org/a": "<url/>"}),
        idempotency_key=None,
        idempotency_ttl_s=60,
        epoch_candidate="e",
        now_us=2,
    ),
    "rotate": lambda: scripts.rotate_call(
        K,
        number=0,
        token="tok",
        expected_open_start="0-0",
        new_open_start="1-0",
        until_us=3,
        closed_count=1,
        xml=b"<urlset/>",
        record="{}",
        now_us=4,
        framework_maxlen=100,
        closed_loc="http://h/t/changelists/0.xml",
        open_loc="http://h/t/changelist.xml",
        index_loc="http://h/t/changelist-index.xml",
    ),
    "framework_resourcelist": lambda: scripts.framework_resourcelist_call(
        K,
        now_us=1,
        interval_us=2,
        framework_maxlen=100,
        list_loc="http://h/t/resourcelist.xml",
        part_loc="http://h/t/resourcelist/0.xml",
        max_entries=50_000,
    ),
    "framework_document": lambda: scripts.framework_document_call(
        K,
        field="fw_caplist",
        digest="d",
        first_change="created",
        now_us=1,
        framework_maxlen=100,
        loc="http://h/t/capabilitylist.xml",
        capability="capabilitylist",
    ),
    "snapshot": lambda: scripts.snapshot_call(K),
    "listed": lambda: scripts.listed_call(K, after="1-0", count=10),
    "lease": lambda: scripts.lease_call(K, token="tok", ttl_ms=1000),
    "trim": lambda: scripts.trim_call(K, min_id="5-0"),
    "cursor": lambda: scripts.cursor_call(
        WebSubKeys("rs"), "s1", token="tok", cursor="1-0 5", ttl_ms=1000
    ),
}


def bound(text: str, table: str) -> list[str]:
    """The names a script binds to ``table`` (KEYS or ARGV), in position order."""
    found = re.findall(rf"^local (\w+) = (?:tonumber\()?{table}\[(\d+)\]", text, re.MULTILINE)
    positions = [int(index) for _, index in found]
    assert positions == list(range(1, len(found) + 1)), f"{table} bound out of order: {found}"
    return [name for name, _ in found]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_builder_names_what_the_script_binds(name: str) -> None:
    text = scripts.load(name)
    call = CALLS[name]()
    assert list(call.keys) == bound(text, "KEYS")
    assert list(call.args) == bound(text, "ARGV")
    assert call.argv[: len(call.args)] == list(call.args.values())


def test_append_packs_each_record_as_the_script_reads_it() -> None:
    text = scripts.load("append")
    fields = int(re.search(r"local RECORD_FIELDS = (\d+)", text).group(1))  # type: ignore[union-attr]
    assert fields == scripts.RECORD_FIELDS
    call = CALLS["append"]()
    values = call.args["packed"].split(scripts.FIELD_SEPARATOR)
    assert call.rest == []
    assert call.args["count"] == 2
    assert len(values) == 2 * fields
    mark = "1 updated " + hashlib.sha1(b"<url/>").hexdigest()
    assert values[:fields] == ["1", RECORD.loc, RECORD.change, mark, "<url/>", "<url/>", "{}"]
    assert values[fields:] == values[:fields]


def test_a_record_holding_the_separator_is_refused_not_split() -> None:
    bad = ChangeRecord(1, "http://e.org/a", "updated", "<url>\0</url>", None, "{}")
    with pytest.raises(ValueError, match="NUL"):
        scripts.append_call(
            K,
            IngestPlan([bad]),
            idempotency_key=None,
            idempotency_ttl_s=60,
            epoch_candidate="e",
            now_us=2,
        )


def test_scripts_that_stamp_times_get_the_server_clock() -> None:
    assert "local function server_now()" in scripts.load("append", server_now=True)
    assert "local function server_now()" not in scripts.load("lease")


def test_the_scripts_writing_a_request_share_its_guards() -> None:
    # append and seed check the checkpoint and the idempotency key with one Lua function.
    for name in ("append", "seed"):
        assert "local function refused_step(" in scripts.load(name, step_guards=True)
    assert "refused_step" not in scripts.load("rotate", server_now=True)


async def test_a_failing_redis_is_store_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    try:
        store = TopicStore(client, prefix="rs")
        with pytest.raises(StoreUnavailable) as excinfo:
            await store.meta("t")
        assert excinfo.value.code == Code.STORE_UNAVAILABLE
        with pytest.raises(StoreUnavailable):
            await store.acquire_lease("t", "tok", 1000)
    finally:
        await client.aclose()


async def test_a_lease_is_given_back_only_by_its_holder(redis: Redis, prefix: str) -> None:
    """Release is one step with the check: a process whose lease expired while it worked
    cannot delete the lease its successor took in the meantime."""
    store = TopicStore(redis, prefix=prefix)
    key = store.keys("t").lease
    assert await store.acquire_lease("t", "first", 60_000)
    await redis.delete(key)  # the first holder's lease expires...
    assert await store.acquire_lease("t", "second", 60_000)  # ...and another takes it
    await store.release_lease("t", "first")
    assert await redis.get(key) == b"second"
    await store.release_lease("t", "second")
    assert await redis.get(key) is None
    assert await store.acquire_lease("t", "first", 60_000)

    bridge = store.keys("t").bridge_lease
    assert await store.acquire_bridge_lease("t", "a", 60_000)
    await store.release_bridge_lease("t", "b")
    assert await redis.get(bridge) == b"a"
    await store.release_bridge_lease("t", "a")
    assert await redis.get(bridge) is None
