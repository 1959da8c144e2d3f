"""``rs-subscribe watch --since``/``--epoch`` the protocol cannot carry: one line, exit 2,
before any network (the Source URL here listens nowhere)."""

from __future__ import annotations

import pytest

from tests.support.cli import rs_subscribe


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "bogus"], "rs-subscribe: --since: 'bogus' is not a W3C Datetime"),
        (["--since", "2026-13-01T00:00Z"], "rs-subscribe: --since: '2026-13-01T00:00Z' is not a"),
        (["--since", "17-x"], "rs-subscribe: --since: position '17-x' is not a stream id"),
    ],
)
async def test_a_bad_resume_point_is_one_line(args: list[str], says: str) -> None:
    code, out, err = await rs_subscribe("watch", "http://127.0.0.1:9", *args)
    assert code == 2 and out == ""
    assert err.startswith(says) and err.count("\n") == 1, err
