"""The OAI-PMH bridge's pure parts: parsing responses safely, the harvest window's overlap,
change times kept forward, resources' URIs and links; the bridge settings' checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from rspush.hub.bridges.http import retry_after_s
from rspush.hub.bridges.oai_parse import (
    DAY,
    SECONDS,
    Header,
    OaiParseError,
    format_datestamp,
    parse_datestamp,
    parse_response,
)
from rspush.hub.bridges.oai_plan import (
    DIGEST_ATTRIBUTE,
    Checkpoint,
    Lane,
    changes,
    lanes,
    list_params,
    next_from,
    record_uri,
)
from rspush.hub.settings import BridgeConfig, Settings, Source, Topic

BASE = "http://repo.example/oai"
T = datetime(2026, 5, 4, 10, 20, 30, tzinfo=UTC)


def envelope(body: str, date: str = "2026-05-04T10:20:30Z") -> bytes:
    return (
        '<?xml version="1.0"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        f"<responseDate>{date}</responseDate><request>{BASE}</request>{body}</OAI-PMH>"
    ).encode()


RECORDS = envelope(
    "<ListRecords>"
    "<record><header><identifier>oai:r:2</identifier><datestamp>2026-05-04T10:00:00Z</datestamp>"
    "<setSpec>a</setSpec><setSpec>b:c</setSpec></header>"
    '<metadata><x xmlns="urn:x" b="2" a="1"><t>two</t></x></metadata></record>'
    '<record><header status="deleted"><identifier>oai:r:1</identifier>'
    "<datestamp>2026-05-03T09:00:00Z</datestamp></header></record>"
    '<resumptionToken cursor="0">tok/1</resumptionToken>'
    "</ListRecords>"
)


def test_list_records_headers_token_and_digest() -> None:
    page = parse_response(RECORDS)
    assert page.response_date == T
    assert page.token == "tok/1"
    first, second = page.headers
    assert (first.identifier, first.sets, first.deleted) == ("oai:r:2", ("a", "b:c"), False)
    assert first.digest is not None and second.digest is None
    assert second.deleted
    # The digest is of the canonical metadata: attribute order, quotes and unused
    # namespaces of ancestors do not change it.
    other = RECORDS.replace(
        b'<metadata><x xmlns="urn:x" b="2" a="1">',
        b"<metadata xmlns:unused='urn:u'><x a='1' xmlns='urn:x' b='2'>",
    )
    assert parse_response(other).headers[0].digest == first.digest


def test_an_empty_token_ends_the_list_and_errors_are_read() -> None:
    page = parse_response(
        envelope('<ListIdentifiers><resumptionToken completeListSize="3"/></ListIdentifiers>')
    )
    assert page.token is None and page.headers == []
    error = parse_response(envelope('<error code="noRecordsMatch">none</error>')).error
    assert error is not None and error.code == "noRecordsMatch"


def test_identify() -> None:
    identify = parse_response(
        envelope(
            "<Identify><baseURL>http://repo.example/oai</baseURL><earliestDatestamp>2001-01-01"
            "</earliestDatestamp><deletedRecord>transient</deletedRecord>"
            "<granularity>YYYY-MM-DD</granularity></Identify>"
        )
    ).identify
    assert identify is not None
    assert (identify.granularity, identify.deleted_record) == (DAY, "transient")
    assert identify.earliest == datetime(2001, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "body",
    [
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "boom">]><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"/>',
        b"<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'><responseDate>",
        b"<html/>",
        envelope("<ListRecords/>", date="yesterday"),
    ],
)
def test_unusable_responses_are_refused(body: bytes) -> None:
    with pytest.raises(OaiParseError):
        parse_response(body)


def test_datestamps_at_the_repository_granularity() -> None:
    assert parse_datestamp("2026-05-04") == datetime(2026, 5, 4, tzinfo=UTC)
    assert format_datestamp(T, DAY) == "2026-05-04"
    assert format_datestamp(T, SECONDS) == "2026-05-04T10:20:30Z"
    # The next window overlaps: the first response's date less a margin, at granularity.
    assert next_from(T, SECONDS) == "2026-05-04T10:20:25Z"
    assert next_from(datetime(2026, 5, 4, 0, 0, 2, tzinfo=UTC), DAY) == "2026-05-03"


def test_list_params_from_and_token() -> None:
    cp = Checkpoint(from_="2026-05-04")
    lane = Lane("oai_dc", "a")
    assert list_params(lane, cp, full=False) == {
        "verb": "ListRecords",
        "metadataPrefix": "oai_dc",
        "set": "a",
        "from": "2026-05-04",
    }
    assert "from" not in list_params(lane, cp, full=True)
    cp.token = "t"
    assert list_params(lane, cp, full=False) == {"verb": "ListRecords", "resumptionToken": "t"}
    assert lanes({"b": "", "a": ""}, []) == [Lane("a"), Lane("b")]


def test_changes_are_forward_and_linked() -> None:
    headers = [
        Header("oai:r:2", T, False, ("a",), "d2"),
        Header("oai:r:1", T - timedelta(days=1), True),
        Header("oai:r:3", T - timedelta(days=2), False),
    ]
    floor = int((T - timedelta(hours=30)).timestamp() * 1_000_000)
    entries, new_floor = changes(
        headers, base_url=BASE, lane=Lane("mods"), namespace="urn:mods", floor_us=floor, now=T
    )
    times = [e.change_time for e in entries]
    assert times == sorted(times) and len(set(times)) == 3
    assert entries[0].loc == record_uri(BASE, "oai:r:3", "mods")
    assert entries[0].lastmod == T - timedelta(days=2)  # the datestamp as it is
    assert entries[1].change == "deleted"
    last = entries[2]
    assert last.loc == f"{BASE}?verb=GetRecord&identifier=oai%3Ar%3A2&metadataPrefix=mods"
    assert [ln.rel for ln in last.links] == ["describedby", "collection"]
    assert last.md is not None and last.md.extra == {DIGEST_ATTRIBUTE: "sha256:d2"}
    assert last.change_time == T and new_floor > floor


def test_checkpoint_round_trip() -> None:
    cp = Checkpoint(from_="2026-05-04", token="x", formats={"oai_dc": "ns"}, deletes=["u"])
    assert Checkpoint.loads(cp.dumps()) == cp
    assert Checkpoint.loads(None) == Checkpoint()


def test_retry_after() -> None:
    assert retry_after_s("120") == 120
    now = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    assert retry_after_s("Mon, 04 May 2026 10:01:00 GMT", now) == 60
    assert retry_after_s("soon") is None


def test_bridge_settings_are_checked() -> None:
    def settings(**bridge: object) -> Settings:
        return Settings(
            topics=[Topic(name="repo")],
            bridges=[{"topic": "repo", "kind": "oai-pmh", "url": BASE} | bridge],  # type: ignore[list-item]
        )

    assert settings().bridges[0].metadata_prefixes == []
    for bad in ({"topic": "nope"}, {"kind": "ftp"}, {"url": "file:///x"}, {"interval_s": 0}):
        with pytest.raises(ValidationError):
            settings(**bad)
    with pytest.raises(ValidationError, match="oai-pmh keys"):
        BridgeConfig(topic="repo", kind="resourcesync", url=BASE, sets=["a"])
    with pytest.raises(ValidationError, match="only Source"):
        Settings(
            topics=[Topic(name="repo")],
            sources=[Source(name="s", token_sha256="0" * 64, topics=["repo"])],
            bridges=[BridgeConfig(topic="repo", kind="oai-pmh", url=BASE)],
        )
