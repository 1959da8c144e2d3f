"""Fixity values: ``hash="algorithm:digest ..."`` (Z39.99 §7) as the spec and ``resync`` write
them, and comparing them with content."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rspush.resourcesync import DigestEncoding, HashValue, parse_hashes
from rspush.resourcesync.hashes import HashSyntaxError, format_hashes

CONTENT = b"x1"  # its sha-256 in base64 holds both '+' and '/': base64 and base64url differ
MD5 = hashlib.md5(CONTENT).digest()
SHA1 = hashlib.sha1(CONTENT).digest()
SHA256 = hashlib.sha256(CONTENT).digest()
SHA512 = hashlib.sha512(CONTENT).digest()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def test_content_exercises_both_base64_alphabets() -> None:
    assert "+" in b64(SHA256) and "/" in b64(SHA256)
    assert b64url(SHA256) != b64(SHA256)


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Hex, as the spec describes and most of its examples write.
        (
            "md5:1584abdf8ebdc9802ac0c6a7402c03b6",
            [("md5", "1584abdf8ebdc9802ac0c6a7402c03b6")],
        ),
        # Base64, as the resync library writes.
        ("md5:1B2M2Y8AsgTpgAmY7PhCfg==", [("md5", "1B2M2Y8AsgTpgAmY7PhCfg==")]),
        (
            "sha-256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
            [("sha-256", "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")],
        ),
        # The spec's Example 27: base64url-like, and (for some) not a digest of any size.
        (
            "sha-256:f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj",
            [("sha-256", "f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj")],
        ),
        (
            "sha-256:f40xZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj",
            [("sha-256", "f40xZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj")],
        ),
        (
            "sha-256:h986gT_t_87HTkjHYE76G558hY-jdfgy76t55sadJUYT",
            [("sha-256", "h986gT_t_87HTkjHYE76G558hY-jdfgy76t55sadJUYT")],
        ),
        # A whitespace-separated list, over several lines as in the spec's Example 13.
        (
            "md5:1e0d5cb8ef6ba40c99b14c0237be735e\n                       "
            "sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784",
            [
                ("md5", "1e0d5cb8ef6ba40c99b14c0237be735e"),
                (
                    "sha-256",
                    "854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784",
                ),
            ],
        ),
        ("  md5:abc\tsha-1:def  ", [("md5", "abc"), ("sha-1", "def")]),
        # Algorithm tokens are kept as written, whatever their case.
        ("SHA-256:ABCDEF", [("SHA-256", "ABCDEF")]),
        ("x.custom_alg-2:z", [("x.custom_alg-2", "z")]),
    ],
)
def test_parse_hashes(text: str, expected: list[tuple[str, str]]) -> None:
    values = parse_hashes(text)
    assert isinstance(values, tuple)
    assert [(v.algorithm, v.digest) for v in values] == expected


@pytest.mark.parametrize(
    "text",
    [
        "1584abdf8ebdc9802ac0c6a7402c03b6",  # no algorithm
        "",  # empty
        "   \n\t",
        "md5:",  # empty digest
        ":1584abdf8ebdc9802ac0c6a7402c03b6",  # empty algorithm
        "md5:1584abdf sha-256",  # second token has no digest
        "md5 : 1584abdf",
        "md5:1584abdf!",  # not a hex/base64 character
        "md5:ab:cd",
        "-md5:abcd",  # an algorithm token starts with a letter or digit
    ],
)
def test_hash_syntax_errors(text: str) -> None:
    with pytest.raises(HashSyntaxError):
        parse_hashes(text)


def test_hash_syntax_error_is_a_value_error_naming_the_token() -> None:
    with pytest.raises(ValueError, match="sha-256"):
        parse_hashes("md5:abcd sha-256")


def test_str_and_format_write_values_back_as_read() -> None:
    text = "md5:1B2M2Y8AsgTpgAmY7PhCfg== sha-256:f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj"
    values = parse_hashes(text)
    assert format_hashes(values) == text
    assert [str(v) for v in values] == text.split()


tokens = st.builds(
    HashValue,
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9+/=_-]{1,90}", fullmatch=True),
)


@settings(deadline=None, max_examples=200)
@given(
    values=st.lists(tokens, min_size=1, max_size=4),
    separators=st.lists(st.sampled_from([" ", "\n", "\t", "  \n   "]), min_size=4, max_size=4),
)
def test_any_list_of_tokens_round_trips(values: list[HashValue], separators: list[str]) -> None:
    text = "".join(str(v) + sep for v, sep in zip(values, separators, strict=False))
    assert parse_hashes(text) == tuple(values)


# --- comparing with content -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        HashValue("md5", MD5.hex()),
        HashValue("md5", MD5.hex().upper()),
        HashValue("md5", b64(MD5)),  # resync
        HashValue("md5", b64(MD5).rstrip("=")),
        HashValue("MD5", MD5.hex()),
        HashValue("sha-1", SHA1.hex()),
        HashValue("sha1", b64(SHA1)),
        HashValue("sha-256", SHA256.hex()),
        HashValue("sha-256", b64(SHA256)),
        HashValue("sha-256", b64url(SHA256)),
        HashValue("sha-256", b64url(SHA256).rstrip("=")),
        HashValue("sha256", SHA256.hex()),
        HashValue("sha-512", SHA512.hex()),
        HashValue("sha-512", b64(SHA512)),
    ],
    ids=str,
)
def test_matches_the_real_digest_in_hex_and_base64(value: HashValue) -> None:
    assert value.matches_content(CONTENT) is True
    assert value.matches_content(CONTENT + b"\n") is False
    assert value.matches_content(b"") is False


@pytest.mark.parametrize(
    "value",
    [
        HashValue("md5", hashlib.md5(b"other").hexdigest()),
        HashValue("md5", b64(hashlib.md5(b"other").digest())),
        HashValue("sha-256", MD5.hex()),  # right content, other algorithm's digest
        HashValue("sha-256", SHA256.hex()[:-2]),  # truncated
        HashValue("sha-256", "f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj"),
        HashValue("md5", "not+base64="),
    ],
    ids=str,
)
def test_wrong_digests_do_not_match(value: HashValue) -> None:
    assert value.matches_content(CONTENT) is False


@pytest.mark.parametrize(
    "value",
    [
        HashValue("crc32", "cbf43926"),
        HashValue("sha3-256", hashlib.sha3_256(CONTENT).hexdigest()),
        HashValue("x-custom", "abcdef"),
    ],
    ids=str,
)
def test_unknown_algorithms_cannot_be_checked(value: HashValue) -> None:
    assert value.hashlib_name is None
    assert value.matches_content(CONTENT) is None
    assert value.encoding is DigestEncoding.UNKNOWN


@pytest.mark.parametrize(
    ("value", "encoding"),
    [
        (HashValue("md5", MD5.hex()), DigestEncoding.HEX),
        (HashValue("md5", MD5.hex().upper()), DigestEncoding.HEX),
        (HashValue("md5", "1584abdf8ebdc9802ac0c6a7402c03b6"), DigestEncoding.HEX),
        (HashValue("md5", "1B2M2Y8AsgTpgAmY7PhCfg=="), DigestEncoding.BASE64),
        (HashValue("md5", "1B2M2Y8AsgTpgAmY7PhCfg"), DigestEncoding.BASE64),
        (HashValue("sha-256", b64(SHA256)), DigestEncoding.BASE64),
        (HashValue("sha-256", b64url(SHA256)), DigestEncoding.BASE64),
        (HashValue("sha-1", SHA1.hex()), DigestEncoding.HEX),
        (HashValue("sha-512", b64(SHA512)), DigestEncoding.BASE64),
        # Base64url of 32 bytes: one of the spec's Example 27 values happens to be.
        (
            HashValue("sha-256", "f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj"),
            DigestEncoding.BASE64,
        ),
        # 44 characters without padding decode to 33 bytes: not a sha-256 digest.
        (
            HashValue("sha-256", "h986gT_t_87HTkjHYE76G558hY-jdfgy76t55sadJUYT"),
            DigestEncoding.UNKNOWN,
        ),
        (HashValue("md5", MD5.hex()[:30]), DigestEncoding.UNKNOWN),  # too short for hex
        (HashValue("sha-256", MD5.hex()), DigestEncoding.UNKNOWN),  # an md5's length
        (HashValue("md5", "z" * 32), DigestEncoding.UNKNOWN),  # hex length, not hex
        (HashValue("md5", "abc"), DigestEncoding.UNKNOWN),
    ],
    ids=str,
)
def test_encoding_classification(value: HashValue, encoding: DigestEncoding) -> None:
    assert value.encoding is encoding


@settings(deadline=None, max_examples=200)
@given(
    content=st.binary(max_size=64),
    algorithm=st.sampled_from(["md5", "sha-1", "sha-256", "sha-512"]),
    style=st.sampled_from(["hex", "HEX", "base64", "base64-unpadded", "base64url"]),
)
def test_any_content_matches_its_own_digest(content: bytes, algorithm: str, style: str) -> None:
    raw = hashlib.new(algorithm.replace("-", ""), content).digest()
    digest = {
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "base64": b64(raw),
        "base64-unpadded": b64(raw).rstrip("="),
        "base64url": b64url(raw).rstrip("="),
    }[style]
    (value,) = parse_hashes(f"{algorithm}:{digest}")

    assert value.matches_content(content) is True
    assert value.matches_content(content + b"!") is False
    expected = DigestEncoding.HEX if style in ("hex", "HEX") else DigestEncoding.BASE64
    assert value.encoding is expected


@given(st.binary(max_size=64), st.sampled_from(["md5", "sha-256", "sha-1"]))
def test_raw_is_the_digest_whatever_its_encoding(content: bytes, algorithm: str) -> None:
    name = {"md5": "md5", "sha-256": "sha256", "sha-1": "sha1"}[algorithm]
    digest = hashlib.new(name, content).digest()
    for written in (
        digest.hex(),
        digest.hex().upper(),
        base64.b64encode(digest).decode(),
        base64.urlsafe_b64encode(digest).decode().rstrip("="),
    ):
        assert HashValue(algorithm, written).raw == digest
    assert HashValue(algorithm, "not-a-digest").raw is None
    assert HashValue("unknown-alg", digest.hex()).raw is None
