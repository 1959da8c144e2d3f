"""Every HTTP response of the hub carries one ``Date``, taken when the response starts, so a
``Last-Modified`` is never later than it (RFC 9110 §8.8.2.1) however busy the loop is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx

from rspush.hub.server import RunningHub
from tests.support.fragments import auth, change_fragment, iso


async def test_one_date_per_response_and_never_before_last_modified(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    when = datetime.now(UTC) - timedelta(minutes=1)
    body = change_fragment(("http://example.com/a", "created", iso(when)))
    assert (await client.post("/topics/dataset1/changes", content=body, headers=auth())).is_success
    for url in ("/healthz", "/topics/dataset1/changelist.xml", "/topics/dataset1/resourcelist.xml"):
        reply = await client.get(url)
        dates = reply.headers.get_list("date")
        assert len(dates) == 1, (url, dates)
        sent = parsedate_to_datetime(dates[0])
        assert abs(sent - datetime.now(UTC)) < timedelta(seconds=5)
        if "last-modified" in reply.headers:
            assert parsedate_to_datetime(reply.headers["last-modified"]) <= sent
