"""rs-validate end to end: the installed console script, real files, a real loopback HTTP
server, exit codes 0/1/2, text and JSON output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.spec import find_spec

EXAMPLES = find_spec() / "examples"
GOOD = EXAMPLES / "v1.1" / "resourcesync_ex_21.xml"  # a closed Change List
WALKTHROUGH = EXAMPLES / "v1.1" / "resourcesync_ex_1.xml"  # no up link: one warning

BROKEN = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>
  <rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>
  <url>
    <loc>http://example.com/b</loc>
    <rs:md change="updated" datetime="2013-01-02T00:00:00Z" length="12x"/>
  </url>
  <url>
    <loc>http://example.com/a</loc>
    <rs:md change="moved" datetime="2013-01-01T12:00:00Z"/>
  </url>
</urlset>
"""


def rs_validate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    script = shutil.which("rs-validate", path=str(Path(sys.executable).parent))
    assert script is not None, "rs-validate is not installed in this environment"
    return subprocess.run(
        [script, *args],
        input=None if stdin is None else stdin.decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def broken_file(tmp_path: Path) -> Path:
    path = tmp_path / "broken.xml"
    path.write_bytes(BROKEN)
    return path


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "good.xml").write_bytes(GOOD.read_bytes())
    (tmp_path / "broken.xml").write_bytes(BROKEN)
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_valid_document_exits_0_and_describes_it() -> None:
    result = rs_validate(str(GOOD))
    assert result.returncode == 0, result.stdout + result.stderr
    # The example files hold the 1.0 text (lastmod as change time), hence version 1.0.
    assert "Change List (ResourceSync 1.0), 4 entries: valid" in result.stdout


def test_invalid_document_exits_1_and_lists_every_violation(broken_file: Path) -> None:
    result = rs_validate(str(broken_file))
    assert result.returncode == 1
    out = result.stdout
    assert "INVALID" in out
    assert "[length-integer, Z39.99 §7]" in out
    assert "entry 0 (line 8)" in out
    assert "[change-value, Z39.99 §7]" in out
    assert "entry 1: [forward-order, Z39.99 §12.1]" in out


def test_schema_option_adds_xsd_errors(broken_file: Path) -> None:
    result = rs_validate("--schema", str(broken_file))
    assert result.returncode == 1
    assert "error: schema: line 8:" in result.stdout
    assert "'moved'" in result.stdout


def test_warnings_pass_unless_strict() -> None:
    assert rs_validate(str(WALKTHROUGH)).returncode == 0
    strict = rs_validate("--strict", str(WALKTHROUGH))
    assert strict.returncode == 1
    assert "up-link" in strict.stdout


def test_json_report(broken_file: Path) -> None:
    result = rs_validate("--json", str(GOOD), str(broken_file))
    assert result.returncode == 1
    reports = json.loads(result.stdout)
    assert [r["valid"] for r in reports] == [True, False]
    assert reports[0]["type"] == "Change List"
    assert reports[0]["entries"] == 4
    rules = {(v["rule"], v["entry"]) for v in reports[1]["violations"]}
    assert {("length-integer", 0), ("change-value", 1), ("forward-order", 1)} <= rules


def test_standard_input() -> None:
    result = rs_validate("-", stdin=GOOD.read_bytes())
    assert result.returncode == 0
    assert result.stdout.startswith("-: Change List")


def test_unusable_document_is_invalid_not_an_io_error(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"<html><body>hello</body></html>")
    result = rs_validate(str(path))
    assert result.returncode == 1
    assert "INVALID: NotResourceSyncError" in result.stdout


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = rs_validate(str(GOOD), str(tmp_path / "absent.xml"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr
    assert "absent.xml" in result.stderr


def test_no_arguments_is_a_usage_error() -> None:
    result = rs_validate()
    assert result.returncode == 2


def test_too_large_for_max_bytes(tmp_path: Path) -> None:
    result = rs_validate("--max-bytes", "100", str(GOOD))
    assert result.returncode == 1
    assert "DocumentTooLargeError" in result.stdout


def test_urls_over_loopback_http(http_root: str) -> None:
    result = rs_validate(f"{http_root}/good.xml", f"{http_root}/broken.xml")
    assert result.returncode == 1
    assert f"{http_root}/good.xml: Change List" in result.stdout
    assert f"{http_root}/broken.xml: Change List" in result.stdout


def test_http_error_exits_2(http_root: str) -> None:
    result = rs_validate(f"{http_root}/missing.xml")
    assert result.returncode == 2
    assert "HTTP 404" in result.stderr


def test_help_explains_exit_codes() -> None:
    result = rs_validate("--help")
    assert result.returncode == 0
    assert "--schema" in result.stdout
    assert "Exit 0 when all are valid" in result.stdout
