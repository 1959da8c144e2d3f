"""An advertised Resource Dump the Source does not serve (404), or serves as something else:
``rs-subscribe baseline`` takes the Resource List instead, as it does for a damaged package."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.agents import mirror_files
from tests.support.cli import rs_subscribe
from tests.support.static_source import (
    T0,
    capability_list,
    running_source,
    serve_resource_list,
    urlset,
)


@pytest.mark.parametrize("dump", ["missing", "not-a-dump"])
async def test_an_unusable_advertised_dump_falls_back_to_the_resource_list(
    tmp_path: Path, dump: str
) -> None:
    async with running_source() as source:
        resources = {"/a.txt": b"alpha", "/b.txt": b"bravo"}
        serve_resource_list(source, resources, at=T0, lastmod=T0)
        if dump == "not-a-dump":
            source.put_document("/resourcedump.xml", urlset("changelist", from_=T0))
        capability_list(
            source, {"resourcedump": "/resourcedump.xml", "resourcelist": "/resourcelist.xml"}
        )
        dest = tmp_path / "mirror"
        code, _, err = await rs_subscribe(
            "baseline",
            source.uri("/capabilitylist.xml"),
            "--dest",
            str(dest),
            "--map",
            f"{source.url}/=",
        )
        assert code == 0, err
        assert "Resource List instead" in err
        assert mirror_files(dest) == resources
