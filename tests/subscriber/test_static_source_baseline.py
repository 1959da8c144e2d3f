"""Baselines from a static Source on the loopback origin: a Resource Dump (Z39.99 §11) of ZIP
packages with manifests — the agent takes the dump, verifies every member, and fetches from
the Source only what the dump got wrong — and a Resource List split under an index (§10.2)."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

from rspush.subscriber.agent import Agent, AgentConfig
from rspush.subscriber.checkpoint import list_topics
from tests.subscriber.agent_helpers import mirror_files
from tests.subscriber.origin import Origin, running_origin

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
AT = "2026-11-01T10:00:00Z"


def md(content: bytes) -> str:
    return f'length="{len(content)}" hash="md5:{hashlib.md5(content).hexdigest()}"'


def package(origin: Origin, members: dict[str, bytes], damaged: str | None = None) -> bytes:
    """A ZIP with a manifest; the member ``damaged`` holds other bytes than it announces."""
    urls = []
    for path, content in members.items():
        urls.append(
            f"<url><loc>{origin.uri(path)}</loc><lastmod>{AT}</lastmod>"
            f'<rs:md {md(content)} path="{path}"/></url>'
        )
    manifest = (
        f'<urlset {NS}><rs:md capability="resourcedump-manifest" at="{AT}"/>'
        + "".join(urls)
        + "</urlset>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.xml", manifest)
        for path, content in members.items():
            archive.writestr(path.lstrip("/"), b"damaged!" if path == damaged else content)
    return buffer.getvalue()


def serve_source(origin: Origin, resources: dict[str, bytes], damaged: str | None) -> None:
    for path, content in resources.items():
        origin.put(path, content)
    paths = sorted(resources)
    halves = [paths[: len(paths) // 2], paths[len(paths) // 2 :]]
    dump_urls = []
    for number, half in enumerate(halves):
        zipped = package(origin, {p: resources[p] for p in half}, damaged)
        origin.put_document(f"/dump/part{number}.zip", zipped, "application/zip")
        dump_urls.append(
            f"<url><loc>{origin.uri(f'/dump/part{number}.zip')}</loc>"
            f'<rs:md {md(zipped)} type="application/zip"/></url>'
        )
    origin.put_document(
        "/resourcedump.xml",
        (
            f'<urlset {NS}><rs:md capability="resourcedump" at="{AT}"/>'
            f'<rs:ln rel="up" href="{origin.uri("/capabilitylist.xml")}"/>'
            + "".join(dump_urls)
            + "</urlset>"
        ).encode(),
    )
    listed = "".join(
        f"<url><loc>{origin.uri(p)}</loc><lastmod>{AT}</lastmod><rs:md {md(c)}/></url>"
        for p, c in sorted(resources.items())
    )
    origin.put_document(
        "/resourcelist.xml",
        (
            f'<urlset {NS}><rs:md capability="resourcelist" at="{AT}"/>'
            f'<rs:ln rel="up" href="{origin.uri("/capabilitylist.xml")}"/>{listed}</urlset>'
        ).encode(),
    )
    origin.put_document(
        "/capabilitylist.xml",
        (
            f'<urlset {NS}><rs:md capability="capabilitylist"/>'
            f"<url><loc>{origin.uri('/resourcelist.xml')}</loc>"
            '<rs:md capability="resourcelist"/></url>'
            f"<url><loc>{origin.uri('/resourcedump.xml')}</loc>"
            '<rs:md capability="resourcedump"/></url></urlset>'
        ).encode(),
    )


RESOURCES = {
    "/a.txt": b"alpha\n",
    "/b/c.txt": b"charlie\n" * 100,
    "/d.bin": bytes(range(256)) * 4,
    "/e.txt": b"echo\n",
}


async def baseline(origin: Origin, dest: Path, **options: object) -> Agent:
    config = AgentConfig(
        source_url=origin.uri("/capabilitylist.xml"),
        dest=dest,
        maps=[(origin.url + "/", "")],
        **options,  # type: ignore[arg-type]
    )
    agent = Agent(config)
    await agent.run(baseline_only=True)
    return agent


async def test_baseline_from_a_resource_dump(tmp_path: Path) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged=None)
        agent = await baseline(origin, tmp_path / "mirror")
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert all(origin.requests[p] == 0 for p in RESOURCES), "resources came from the dump"
        assert origin.requests["/dump/part0.zip"] == origin.requests["/dump/part1.zip"] == 1
        assert agent.mirror is not None and agent.mirror.stats["applied"] == len(RESOURCES)


async def test_a_dump_member_that_fails_verification_is_fetched_from_the_source(
    tmp_path: Path,
) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged="/e.txt")
        await baseline(origin, tmp_path / "mirror")
        # The damaged member is never written; the Source's own copy (verified against the
        # same manifest entry) is.
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert origin.requests["/e.txt"] == 1
        assert all(origin.requests[p] == 0 for p in RESOURCES if p != "/e.txt")


async def test_no_dump_takes_the_resource_list(tmp_path: Path) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged=None)
        await baseline(origin, tmp_path / "mirror", use_dump=False)
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert origin.requests["/dump/part0.zip"] == 0
        assert all(origin.requests[p] == 1 for p in RESOURCES)


async def test_baseline_from_a_resource_list_index(tmp_path: Path) -> None:
    """Parts with different ``at``: incremental sync must start at the earliest."""
    async with running_origin() as origin:
        for path, content in RESOURCES.items():
            origin.put(path, content)
        paths = sorted(RESOURCES)
        ats = ["2026-11-01T10:00:05Z", "2026-11-01T10:00:01Z"]
        parts = []
        for number, (half, at) in enumerate(zip([paths[:2], paths[2:]], ats, strict=True)):
            listed = "".join(
                f"<url><loc>{origin.uri(p)}</loc><lastmod>{AT}</lastmod>"
                f"<rs:md {md(RESOURCES[p])}/></url>"
                for p in half
            )
            origin.put_document(
                f"/resourcelist-{number}.xml",
                (
                    f'<urlset {NS}><rs:md capability="resourcelist" at="{at}"/>'
                    f'<rs:ln rel="index" href="{origin.uri("/resourcelist-index.xml")}"/>'
                    f"{listed}</urlset>"
                ).encode(),
            )
            parts.append(
                f"<sitemap><loc>{origin.uri(f'/resourcelist-{number}.xml')}</loc></sitemap>"
            )
        origin.put_document(
            "/resourcelist-index.xml",
            (
                f'<sitemapindex {NS}><rs:md capability="resourcelist" at="{ats[0]}"/>'
                + "".join(parts)
                + "</sitemapindex>"
            ).encode(),
        )
        origin.put_document(
            "/capabilitylist.xml",
            (
                f'<urlset {NS}><rs:md capability="capabilitylist"/>'
                f"<url><loc>{origin.uri('/resourcelist-index.xml')}</loc>"
                '<rs:md capability="resourcelist"/></url></urlset>'
            ).encode(),
        )
        agent = await baseline(origin, tmp_path / "mirror")
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        [(state, counts)] = list_topics(agent.config.state_path)
        assert counts["resources"] == len(RESOURCES)
        assert state.baseline_at is not None
        assert state.baseline_at.isoformat() == "2026-11-01T10:00:01+00:00"
