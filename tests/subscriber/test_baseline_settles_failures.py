"""A baseline settles the failures recorded before it: ``rs-subscribe status`` no longer shows
``HTTP 404`` rows for resources the Source has since dropped from its Resource List."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.agents import mirror_files
from tests.support.cli import rs_subscribe
from tests.support.static_source import (
    T0,
    T1,
    capability_list,
    running_source,
    serve_resource_list,
)


async def test_a_rebaseline_clears_the_failures_it_supersedes(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        serve_resource_list(source, {"/a.txt": b"alpha", "/gone.txt": b"gone"}, at=T0, lastmod=T0)
        source.delete("/gone.txt")  # listed, but 404
        dest = tmp_path / "mirror"
        state = dest / ".rs-subscribe" / "state.sqlite"
        args = ("--dest", str(dest), "--map", f"{source.url}/=")

        async def failures() -> list[dict[str, str]]:
            code, out, err = await rs_subscribe("status", "--state", str(state), "--json")
            assert code == 0, err
            [topic] = json.loads(out)
            return list(topic["recent_failures"])

        code, _, err = await rs_subscribe("baseline", source.uri("/capabilitylist.xml"), *args)
        assert code == 1, err  # a resource failed
        [failure] = await failures()
        assert failure["uri"] == source.uri("/gone.txt")
        assert "404" in failure["reason"]

        # The Source drops it from its list; a new baseline settles the old failure.
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T1, lastmod=T0)
        code, _, err = await rs_subscribe("baseline", source.uri("/capabilitylist.xml"), *args)
        assert code == 0, err
        assert await failures() == []
        assert mirror_files(dest) == {"/a.txt": b"alpha"}
