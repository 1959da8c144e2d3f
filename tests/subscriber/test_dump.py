"""Resource Dump packages (Z39.99 §11.2): real ZIP files built in tmp_path, read back safely;
and ``rs-subscribe baseline`` given a package ``zipfile`` cannot even open (it falls back to
the Resource List, or names the package in one error line)."""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rspush.resourcesync import Entry, Metadata
from rspush.subscriber.dump import (
    CHUNK_BYTES,
    DumpError,
    DumpMember,
    extract_member,
    open_package,
    read_manifest,
    verify,
)
from tests.support.agents import mirror_files
from tests.support.cli import rs_subscribe
from tests.support.static_source import (
    NS,
    T0,
    capability_list,
    md,
    running_source,
    serve_resource_list,
    urlset,
)

RES1 = b"<html><body>res1</body></html>\n"
RES2 = b"%PDF-1.4 " + bytes(range(256)) * 40  # compressible but not trivially so
UP = '<rs:ln rel="up" href="http://example.com/dataset1/capabilitylist.xml"/>'


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def url(loc: str, **md: str) -> str:
    """One manifest ``<url>`` as in Example 18; ``md`` becomes the ``rs:md`` attributes."""
    attrs = " ".join(f'{name}="{value}"' for name, value in md.items())
    return (
        f"<url><loc>{loc}</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
        + (f"<rs:md {attrs}/>" if md else "")
        + "</url>"
    )


def manifest(*entries: str, capability: str = "resourcedump-manifest", root: str = "urlset") -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"\n'
        '        xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
        f"  {UP}\n"
        f'  <rs:md capability="{capability}" at="2013-01-03T09:00:00Z"'
        ' completed="2013-01-03T09:02:00Z"/>\n  ' + "\n  ".join(entries) + f"\n</{root}>\n"
    )


def good_manifest() -> str:
    return manifest(
        url(
            "http://example.com/res1",
            hash=f"md5:{md5_hex(RES1)}",
            length=str(len(RES1)),
            type="text/html",
            path="/resources/res1",
        ),
        url(
            "http://example.com/res2",
            hash=f"md5:{md5_b64(RES2)} sha-256:{sha256_hex(RES2)}",
            length=str(len(RES2)),
            type="application/pdf",
            path="/resources/res2",
        ),
        url(
            "http://example.com/res3",
            hash=f"sha-256:{sha256_b64(RES1)}",
            path="/resources/sub/res3",
        ),
    )


def write_zip(
    path: Path,
    members: dict[str, bytes | str],
    *,
    compression: int = zipfile.ZIP_DEFLATED,
    stored: frozenset[str] = frozenset(),
) -> Path:
    with zipfile.ZipFile(path, "w") as package:
        for name, data in members.items():
            method = zipfile.ZIP_STORED if name in stored else compression
            package.writestr(name, data, compress_type=method)
    return path


def good_package(tmp_path: Path) -> Path:
    return write_zip(
        tmp_path / "package.zip",
        {
            "manifest.xml": good_manifest(),
            "resources/res1": RES1,
            "resources/res2": RES2,
            "resources/sub/res3": RES1,
        },
        stored=frozenset({"resources/res1"}),
    )


@contextmanager
def opened(path: Path) -> Iterator[zipfile.ZipFile]:
    package = open_package(path, package_name=path.name)
    try:
        yield package
    finally:
        package.close()


def members_of(path: Path) -> list[DumpMember]:
    with opened(path) as package:
        return read_manifest(package, package_name="http://example.com/package.zip")


def refusal(path: Path) -> str:
    with pytest.raises(DumpError) as caught:
        members_of(path)
    return str(caught.value)


def member(**md: object) -> DumpMember:
    return DumpMember(
        entry=Entry(loc="http://example.com/res", md=Metadata.model_validate({"path": "/r", **md})),
        path="r",
    )


def set_flag_bits(path: Path, name: str, bits: int) -> None:
    """Set general-purpose flag bits of ``name`` in its local and central headers, as a
    ZIP tool that encrypts would (zipfile cannot write encrypted members)."""
    data = bytearray(path.read_bytes())
    # (signature, offset of the flags, offset of the name length, offset of the name)
    for signature, flags_at, length_at, name_at in [
        (b"PK\x03\x04", 6, 26, 30),  # local file header
        (b"PK\x01\x02", 8, 28, 46),  # central directory header
    ]:
        at = data.find(signature)
        while at != -1:
            (name_length,) = struct.unpack_from("<H", data, at + length_at)
            if data[at + name_at : at + name_at + name_length] == name.encode():
                (flags,) = struct.unpack_from("<H", data, at + flags_at)
                struct.pack_into("<H", data, at + flags_at, flags | bits)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))


# --- happy path ---------------------------------------------------------------------------


def test_reads_manifest_and_extracts_stored_and_deflated_members(tmp_path: Path) -> None:
    path = good_package(tmp_path)
    with opened(path) as package:
        members = read_manifest(package, package_name="http://example.com/package.zip")
        assert [(m.entry.loc, m.path) for m in members] == [
            ("http://example.com/res1", "resources/res1"),
            ("http://example.com/res2", "resources/res2"),
            ("http://example.com/res3", "resources/sub/res3"),
        ]
        assert package.getinfo("resources/res1").compress_type == zipfile.ZIP_STORED
        assert package.getinfo("resources/res2").compress_type == zipfile.ZIP_DEFLATED
        assert members[0].entry.md is not None and members[0].entry.md.type == "text/html"

        expected = {"resources/res1": RES1, "resources/res2": RES2, "resources/sub/res3": RES1}
        for index, item in enumerate(members):
            target = tmp_path / f"tmp-{index}"
            length, digests = extract_member(package, item, target, max_bytes=1 << 20)
            assert target.read_bytes() == expected[item.path]
            assert length == len(expected[item.path])
            assert verify(item, length, digests) is None

    assert set(digests) == {"sha256"}
    with opened(path) as package:
        res2 = members[1]
        _, digests = extract_member(package, res2, tmp_path / "again", max_bytes=1 << 20)
    assert digests == {
        "md5": hashlib.md5(RES2).digest(),
        "sha256": hashlib.sha256(RES2).digest(),
    }


def test_spec_example_18_manifest_is_read(tmp_path: Path, spec_dir: Path) -> None:
    example = (spec_dir / "examples/v1.1/resourcesync_ex_18.xml").read_bytes()
    path = write_zip(
        tmp_path / "package.zip",
        {"manifest.xml": example, "resources/res1": b"one", "resources/res2": b"two"},
    )
    members = members_of(path)
    assert [m.path for m in members] == ["resources/res1", "resources/res2"]
    # Our bytes are not the example's bitstreams: verification says so, with the reason.
    with opened(path) as package:
        length, digests = extract_member(package, members[1], tmp_path / "t", max_bytes=1 << 20)
    problem = verify(members[1], length, digests)
    assert problem is not None
    assert "3 bytes, the manifest says length=14599" in problem
    assert "md5" in problem and "sha-256" in problem


def test_path_without_leading_slash_as_resync_writes_it(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "package.zip",
        {
            "manifest.xml": manifest(url("http://example.com/a", path="dir/a")),
            "dir/a": b"a",
        },
    )
    assert [m.path for m in members_of(path)] == ["dir/a"]


def test_manifest_without_entries_is_an_empty_package(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "package.zip", {"manifest.xml": manifest()})
    assert members_of(path) == []


def test_unknown_hash_algorithm_is_skipped(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "package.zip",
        {
            "manifest.xml": manifest(
                url("http://example.com/a", path="/a", hash=f"whirlpool:abcd md5:{md5_hex(b'a')}")
            ),
            "a": b"a",
        },
    )
    with opened(path) as package:
        (item,) = read_manifest(package, package_name="p")
        length, digests = extract_member(package, item, tmp_path / "t", max_bytes=10)
    assert set(digests) == {"md5"}
    assert verify(item, length, digests) is None


def test_member_exactly_at_the_limit_is_accepted(tmp_path: Path) -> None:
    data = b"x" * (CHUNK_BYTES + 1)
    path = write_zip(
        tmp_path / "package.zip",
        {"manifest.xml": manifest(url("http://example.com/a", path="/a")), "a": data},
    )
    with opened(path) as package:
        (item,) = read_manifest(package, package_name="p")
        length, _ = extract_member(package, item, tmp_path / "t", max_bytes=len(data))
    assert length == len(data) == (tmp_path / "t").stat().st_size


# --- refused packages ---------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"not a zip at all", b"PK\x03\x04" + b"\0" * 40])
def test_not_a_zip(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "package.zip"
    path.write_bytes(data)
    with pytest.raises(DumpError, match=r"package\.zip: not a usable ZIP file") as caught:
        open_package(path, package_name="package.zip")
    assert isinstance(caught.value.__cause__, zipfile.BadZipFile)


def test_manifest_missing(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "package.zip", {"resources/manifest.xml": good_manifest()})
    message = refusal(path)
    assert message.startswith("http://example.com/package.zip: no manifest.xml at the top level")
    assert "§11.2" in message


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("this is not XML", "manifest.xml: not a usable manifest: .*not well-formed XML"),
        ("", "manifest.xml: not a usable manifest: empty document"),
        (
            manifest().replace("<urlset", '<!DOCTYPE urlset [<!ENTITY x "x">]>\n<urlset', 1),
            "manifest.xml: not a usable manifest: .*DTD",
        ),
        (
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>',
            "manifest.xml: not a usable manifest: .*not a ResourceSync document",
        ),
        (
            manifest(capability="resourcelist"),
            "manifest.xml: a <urlset> with capability='resourcelist'; a Resource Dump Manifest",
        ),
        (
            manifest(capability="changedump-manifest"),
            "capability='changedump-manifest'; a Resource Dump Manifest",
        ),
        (
            manifest(root="sitemapindex"),
            "a <sitemapindex> with capability='resourcedump-manifest'; a Resource Dump",
        ),
    ],
)
def test_manifest_unusable(tmp_path: Path, document: str, expected: str) -> None:
    path = write_zip(tmp_path / "package.zip", {"manifest.xml": document, "a": b"a"})
    with pytest.raises(DumpError, match=expected) as caught:
        members_of(path)
    assert caught.value.package == "http://example.com/package.zip"
    assert caught.value.member == "manifest.xml"


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            url("http://example.com/a", length="1"),
            "entry 0 (http://example.com/a): has no rs:md path",
        ),
        (url("http://example.com/a"), "entry 0 (http://example.com/a): has no rs:md path"),
        ("<url><rs:md path='/a'/></url>", "entry 0: has no <loc>"),
        (url("http://example.com/a", path="/a", hash="md5"), "entry 0: <rs:md>@hash:"),
        (url("http://example.com/a", path="/a", length="1e3"), "entry 0: length='1e3'"),
    ],
)
def test_manifest_entry_unusable(tmp_path: Path, entry: str, expected: str) -> None:
    path = write_zip(tmp_path / "package.zip", {"manifest.xml": manifest(entry), "a": b"a"})
    message = refusal(path)
    assert message.startswith("http://example.com/package.zip: manifest.xml entry 0")
    assert expected in message


@pytest.mark.parametrize(
    ("odd", "reason"),
    [
        ("/../etc/passwd", "'..' segment"),
        ("/resources/../../x", "'..' segment"),
        ("/./a", "'.' or '..' segment"),
        ("/a//b", "empty"),
        ("/a/", "empty"),
        ("//etc/passwd", "is absolute"),
        ("/C:/Windows/x", "is absolute"),
        ("C:x", "is absolute"),
        ("/a\\..\\b", "backslash"),
        ("/a&#9;b", "control character"),
        ("/", "names no file"),
    ],
)
def test_odd_paths_refused(tmp_path: Path, odd: str, reason: str) -> None:
    # The member exists under the odd name too: refused for the name, not for absence.
    name = odd.replace("&#9;", "\t").removeprefix("/")
    members: dict[str, bytes | str] = {
        "manifest.xml": manifest(url("http://example.com/a", path=odd))
    }
    if name:
        members[name] = b"a"
    path = write_zip(tmp_path / "package.zip", members)
    message = refusal(path)
    assert "manifest.xml entry 0 (http://example.com/a): path" in message
    assert reason in message


def test_member_missing(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "package.zip",
        {"manifest.xml": good_manifest(), "resources/res1": RES1, "resources/res2": RES2},
    )
    message = refusal(path)
    assert message == (
        "http://example.com/package.zip: manifest.xml entry 2 (http://example.com/res3): "
        "'resources/sub/res3' is not in the package"
    )


@pytest.mark.parametrize("name", ["manifest.xml", "a"])
def test_duplicate_member_names_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "package.zip"
    with (
        zipfile.ZipFile(path, "w") as package,
        pytest.warns(UserWarning, match="Duplicate name"),
    ):
        package.writestr("manifest.xml", manifest(url("http://example.com/a", path="/a")))
        package.writestr("a", b"a")
        package.writestr(name, b"second copy")
    assert f"'{name}' occurs 2 times in the ZIP" in refusal(path)


@pytest.mark.parametrize("name", ["manifest.xml", "a"])
def test_encrypted_member_refused(tmp_path: Path, name: str) -> None:
    path = write_zip(
        tmp_path / "package.zip",
        {"manifest.xml": manifest(url("http://example.com/a", path="/a")), "a": b"a"},
    )
    set_flag_bits(path, name, 0x1)
    with opened(path) as package:
        assert package.getinfo(name).flag_bits & 0x1  # really flagged in the file
    assert f"'{name}' is encrypted" in refusal(path)


def test_bzip2_member_refused(tmp_path: Path) -> None:
    # zipfile inflates a whole BZIP2/LZMA block per read: unbounded, so not read at all.
    path = write_zip(
        tmp_path / "package.zip",
        {"manifest.xml": manifest(url("http://example.com/a", path="/a")), "a": b"a"},
        compression=zipfile.ZIP_BZIP2,
        stored=frozenset({"manifest.xml"}),
    )
    assert "'a' uses ZIP compression method 12; only stored (0) and DEFLATE (8)" in refusal(path)


def test_manifest_over_the_byte_cap_is_refused_while_streaming(tmp_path: Path) -> None:
    # 16 MB of comment inflates from a few KB; the cap stops reading at 64 KB.
    bomb = manifest().replace("<urlset", "<!--" + " " * (16 << 20) + "-->\n<urlset", 1)
    path = write_zip(tmp_path / "package.zip", {"manifest.xml": bomb})
    assert path.stat().st_size < 100_000
    with opened(path) as package, pytest.raises(DumpError, match="over the limit of 65536"):
        read_manifest(package, package_name="p", max_manifest_bytes=64 * 1024)


def test_damaged_member_is_refused_on_extraction(tmp_path: Path) -> None:
    path = good_package(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.find(RES1)  # res1 is stored: flip one byte of its data, so the CRC fails
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with opened(path) as package:
        item = read_manifest(package, package_name="p")[0]
        with pytest.raises(DumpError, match="resources/res1: damaged ZIP entry .*CRC"):
            extract_member(package, item, tmp_path / "t", max_bytes=1 << 20, package_name="p")


def test_header_claiming_fewer_bytes_is_refused(tmp_path: Path) -> None:
    # A central directory that understates the size: zipfile stops there and the CRC fails.
    path = good_package(tmp_path)
    with opened(path) as package:
        item = read_manifest(package, package_name="p")[1]
        package.getinfo(item.path).file_size = 10
        with pytest.raises(DumpError, match="damaged ZIP entry"):
            extract_member(package, item, tmp_path / "t", max_bytes=1 << 20)


# --- zip bombs ----------------------------------------------------------------------------

BOMB_BYTES = 32 << 20


@pytest.fixture(scope="module")
def bomb_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 MB of zeros deflated to ~32 KB; the manifest says 1000 bytes."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr(
            "manifest.xml",
            manifest(
                url("http://example.com/a", path="/a", length="1000"),
                url("http://example.com/b", path="/b"),
            ),
        )
        for name in ("a", "b"):
            with package.open(name, "w") as member_file:
                chunk = bytes(1 << 20)
                for _ in range(BOMB_BYTES >> 20):
                    member_file.write(chunk)
    assert path.stat().st_size < 200_000
    return path


@pytest.mark.parametrize(
    ("index", "max_bytes", "limit", "says"),
    [
        (0, 1 << 20, 1000, "manifest length 1000, limit 1048576"),  # manifest length is lower
        (0, 500, 500, "manifest length 1000, limit 500"),  # max_bytes is lower
        (1, 1 << 20, 1 << 20, "limit 1048576"),  # no manifest length: max_bytes alone
    ],
)
def test_zip_bomb_is_refused_with_bounded_disk_and_memory(
    bomb_zip: Path, tmp_path: Path, index: int, max_bytes: int, limit: int, says: str
) -> None:
    target = tmp_path / "target"
    with opened(bomb_zip) as package:
        item = read_manifest(package, package_name="bomb.zip")[index]
        assert package.getinfo(item.path).file_size == BOMB_BYTES  # the header is honest
        tracemalloc.start()
        try:
            with pytest.raises(DumpError) as caught:
                extract_member(package, item, target, max_bytes=max_bytes)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    message = str(caught.value)
    assert f"inflates to more than {limit} bytes ({says}; the ZIP header says" in message
    assert message.endswith("refused before writing more")
    assert target.stat().st_size <= limit
    assert peak < 4 * CHUNK_BYTES + (1 << 20)


# --- verify -------------------------------------------------------------------------------


def test_verify_accepts_hex_and_base64() -> None:
    data = b"hello"
    digests = {"md5": hashlib.md5(data).digest(), "sha256": hashlib.sha256(data).digest()}
    for hash_value in (
        f"md5:{md5_hex(data)}",
        f"md5:{md5_b64(data)}",
        f"sha-256:{sha256_hex(data)} md5:{md5_b64(data)}",
        f"sha-256:{sha256_b64(data)}",
    ):
        assert verify(member(hash=hash_value, length=5), 5, digests) is None


def test_verify_without_fixity_accepts_anything() -> None:
    assert verify(member(), 12345, {}) is None


def test_verify_reports_wrong_length() -> None:
    problem = verify(member(length=6), 5, {})
    assert problem == "r (http://example.com/res): 5 bytes, the manifest says length=6"


@pytest.mark.parametrize("encode", [md5_hex, md5_b64])
def test_verify_reports_wrong_hash(encode: Callable[[bytes], str]) -> None:
    expected = encode(b"other")
    actual = hashlib.md5(b"hello").digest()
    problem = verify(member(hash=f"md5:{expected}"), 5, {"md5": actual})
    assert problem == (
        f"r (http://example.com/res): md5 is {actual.hex()}, the manifest says md5:{expected}"
    )


def test_verify_reports_every_problem_and_missing_digests() -> None:
    problem = verify(
        member(hash=f"md5:{md5_hex(b'x')} sha-256:{sha256_hex(b'x')}", length=1), 2, {}
    )
    assert problem is not None
    assert "2 bytes, the manifest says length=1" in problem
    assert "no md5 digest was computed" in problem
    assert "no sha256 digest was computed" in problem


def damaged_package(damage: str) -> bytes:
    """A ZIP whose first central-directory record makes :class:`zipfile.ZipFile` raise
    something other than BadZipFile."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.xml", f'<urlset {NS}><rs:md capability="x"/></urlset>')
        archive.writestr("a.txt", b"alpha")
    package = bytearray(buffer.getvalue())
    record = package.index(b"PK\x01\x02")
    if damage == "NotImplementedError":
        # "version needed to extract" 20.0: zipfile refuses versions it does not know.
        package[record + 6 : record + 8] = struct.pack("<H", 200)
    else:
        # The UTF-8 flag on a name that is not UTF-8: UnicodeDecodeError.
        (flags,) = struct.unpack("<H", package[record + 8 : record + 10])
        package[record + 8 : record + 10] = struct.pack("<H", flags | 0x800)
        package[record + 46] = 0xFF
    damaged = bytes(package)
    error = {"NotImplementedError": NotImplementedError, "UnicodeDecodeError": UnicodeDecodeError}
    with pytest.raises(error[damage]):
        zipfile.ZipFile(io.BytesIO(damaged))
    return damaged


@pytest.mark.parametrize("damage", ["NotImplementedError", "UnicodeDecodeError"])
@pytest.mark.parametrize("with_resource_list", [False, True], ids=["dump-only", "and-list"])
async def test_hostile_dump_package(tmp_path: Path, damage: str, with_resource_list: bool) -> None:
    """A package ``zipfile`` fails to open with another error than BadZipFile: ``rs-subscribe
    baseline`` takes the Resource List if there is one, else names the package in one error
    line; never a traceback."""
    async with running_source() as source:
        package = damaged_package(damage)
        source.put_document("/p.zip", package, "application/zip")
        source.put_document(
            "/resourcedump.xml",
            urlset(
                "resourcedump",
                f"<url><loc>{source.uri('/p.zip')}</loc>"
                f'<rs:md {md(package)} type="application/zip"/></url>',
                at=T0,
            ),
        )
        capabilities = {"resourcedump": "/resourcedump.xml"}
        resources = {"/a.txt": b"alpha", "/b.txt": b"bravo"}
        if with_resource_list:
            capabilities["resourcelist"] = "/resourcelist.xml"
            serve_resource_list(source, resources, at=T0, lastmod=T0)
        capability_list(source, capabilities)
        dest = tmp_path / "mirror"
        code, _, err = await rs_subscribe(
            "baseline",
            source.uri("/capabilitylist.xml"),
            "--dest",
            str(dest),
            "--map",
            f"{source.url}/=",
        )
        assert "Traceback" not in err, err
        if with_resource_list:
            assert code == 0, err
            assert mirror_files(dest) == resources
        else:
            assert code == 1, err
            errors = [line for line in err.splitlines() if line.startswith("rs-subscribe:")]
            assert len(errors) == 1, err
            assert source.uri("/p.zip") in errors[0], err
            assert mirror_files(dest) == {}
