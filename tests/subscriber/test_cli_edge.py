"""``rs-subscribe`` at its edge, run as an operator runs it against a static Source: absolute
``--map`` targets inside ``--dest``, a baseline that wrote nothing because every resource was
refused, ``status --dest``, and file modes that follow the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.cli import rs_subscribe
from tests.support.static_source import (
    T0,
    StaticSource,
    capability_list,
    running_source,
    serve_resource_list,
)

RESOURCES = {"/a.txt": b"alpha", "/sub/b.txt": b"bravo"}


def _serve(source: StaticSource) -> str:
    capability_list(source, {"resourcelist": "/resourcelist.xml"})
    serve_resource_list(source, RESOURCES, at=T0, lastmod=T0)
    return source.uri("/capabilitylist.xml")


async def _baseline(source: StaticSource, dest: Path, *maps: str) -> tuple[int, str, str]:
    args = [arg for target in maps for arg in ("--map", target)]
    return await rs_subscribe("baseline", _serve(source), "--dest", str(dest), *args)


@pytest.mark.parametrize("inside", ["", "/docs"])
async def test_an_absolute_map_target_inside_dest_names_that_folder(
    tmp_path: Path, inside: str
) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        code, _, err = await _baseline(source, dest, f"{source.url}/={dest}{inside}")
    assert code == 0, err
    assert (dest / inside.lstrip("/") / "a.txt").read_bytes() == b"alpha"
    assert (dest / inside.lstrip("/") / "sub" / "b.txt").read_bytes() == b"bravo"


async def test_a_relative_map_target_stays_relative_to_dest(tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        code, _, err = await _baseline(source, dest, f"{source.url}/=docs")
    assert code == 0, err
    assert (dest / "docs" / "a.txt").read_bytes() == b"alpha"


@pytest.mark.parametrize("outside", ["elsewhere", "mirror/../elsewhere", "mirror-2"])
async def test_an_absolute_map_target_outside_dest_is_refused(tmp_path: Path, outside: str) -> None:
    dest = tmp_path / "mirror"
    code, out, err = await rs_subscribe(
        "baseline",
        "http://127.0.0.1:9/capabilitylist.xml",
        "--dest",
        str(dest),
        "--map",
        f"http://127.0.0.1:9/={tmp_path}/{outside}",
    )
    assert code == 2, err
    assert "outside the destination" in err
    assert len(err.strip().splitlines()) == 1


async def test_a_baseline_that_refused_everything_fails_naming_the_first(tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        # A map for another host: neither resource is covered.
        code, _, err = await _baseline(source, dest, "http://elsewhere.example/=")
        first = source.uri("/a.txt")
    assert code == 1, err
    summary = [line for line in err.splitlines() if line.startswith("rs-subscribe: ")]
    assert summary == [f"rs-subscribe: 0 written, 2 refused: no --map covers {first}"], err
    assert not (dest / "a.txt").exists()


async def test_a_run_that_refused_everything_ends_instead_of_following(tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        url = _serve(source)
        code, _, err = await rs_subscribe(
            "run", url, "--dest", str(dest), "--map", "http://elsewhere.example/="
        )
        first = source.uri("/a.txt")
    assert code == 1, err
    assert f"rs-subscribe: 0 written, 2 refused: no --map covers {first}" in err


async def test_the_baseline_line_counts_resources_not_filtered_out(tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        url = _serve(source)
        code, _, err = await rs_subscribe(
            "baseline", url, "--dest", str(dest), "--exclude", f"{source.url}/sub/"
        )
    assert code == 0, err
    assert "baseline complete: 1 resources (1 filtered out, 0 refused)" in err, err


async def test_status_reads_the_default_state_file_under_dest(tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    async with running_source() as source:
        code, _, err = await _baseline(source, dest)
        assert code == 0, err
        code, out, err = await rs_subscribe("status", "--dest", str(dest))
        assert code == 0, err
        assert f"{source.url}" in out
        assert "resources" in out


async def test_status_needs_a_state_or_a_dest(tmp_path: Path) -> None:
    code, _, err = await rs_subscribe("status")
    assert code == 2
    assert "--state" in err and "--dest" in err


async def test_status_of_a_folder_is_one_clear_line(tmp_path: Path) -> None:
    code, out, err = await rs_subscribe("status", "--state", str(tmp_path))
    assert code == 2
    assert out == ""
    assert err.strip().splitlines() == [f"rs-subscribe: {tmp_path} is a folder, not a state file"]
    assert "I/O" not in err


@pytest.mark.parametrize("mask", [0o022, 0o027])
async def test_mirrored_files_and_folders_follow_the_umask(tmp_path: Path, mask: int) -> None:
    dest = tmp_path / "mirror"
    previous = os.umask(mask)  # inherited by the rs-subscribe process
    try:
        async with running_source() as source:
            code, _, err = await _baseline(source, dest)
    finally:
        os.umask(previous)
    assert code == 0, err
    assert stat.S_IMODE((dest / "a.txt").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((dest / "sub" / "b.txt").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((dest / "sub").stat().st_mode) == 0o777 & ~mask
