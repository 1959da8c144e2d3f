"""Benchmark of the OAI-PMH bridge: catch-up throughput on a large backlog, beside the bare
parse rate of the same responses, and change-at-repository to applied-at-Destination latency.

Run from the repository root::

    .venv/bin/python -m bench.bench_bridges [--records 100000] [--page 500]
        [--interval 1] [--samples 20] [--json out.json]

The repository is a static OAI-PMH server in this process (a thread): every ``ListRecords``
page of the backlog (``--records`` records of one format, ``--page`` per page, resumption
tokens) is built once, before the clock starts, so the figures are the bridge's and not a
repository's query time. Phases:

1. **parse**: :func:`rspush.hub.bridges.oai_parse.parse_response` over every page, in this
   process — the bare parse rate of the very bytes the bridge reads (records/s);
2. **catch-up**: ``rs-hub serve`` (its own process, embedded valkey-server) with an OAI-PMH
   bridge on an empty topic, timed from its readiness until ``rspush_bridge_changes_total``
   reaches ``--records`` (records/s), and from its first bridged change (steady records/s,
   and its ratio to the parse rate);
3. **latency**: another hub bridging a small repository with ``interval_s = --interval``
   and ``rs-subscribe run`` mirroring it; one record at a time is added to the repository
   at a random moment and timed until the agent reports it applied (its ``--events``), for
   ``--samples`` records. Expected: about half the poll interval plus the hub's and the
   agent's work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

import httpx

from bench.harness.hub import metric, start_hub
from bench.harness.results import command_line, git_state, log, quantiles, write_json
from rspush.hub.bridges.oai_parse import parse_response
from rspush.hub.bridges.oai_plan import record_uri
from rspush.resourcesync.w3cdt import parse_w3c_datetime

OAI_DC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
BACKLOG_DATESTAMP = "2020-01-01T00:00:00Z"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _envelope(body: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        f"<responseDate>{_now()}</responseDate><request>bench</request>{body}</OAI-PMH>"
    ).encode()


def _record(identifier: str, datestamp: str, title: str) -> str:
    return (
        f"<record><header><identifier>{escape(identifier)}</identifier>"
        f"<datestamp>{datestamp}</datestamp><setSpec>bench</setSpec></header>"
        f'<metadata><oai_dc:dc xmlns:oai_dc="{OAI_DC}" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>{escape(title)}</dc:title><dc:identifier>{escape(identifier)}"
        "</dc:identifier><dc:creator>Bench, A.</dc:creator><dc:date>2020-01-01</dc:date>"
        "</oai_dc:dc></metadata></record>"
    )


class StaticRepository:
    """Pre-built backlog pages, plus records added live (answered to ``from`` queries)."""

    def __init__(self, records: int, page: int) -> None:
        self.pages: list[str] = []
        for first in range(0, records, page):
            last = min(first + page, records)
            body = "".join(
                _record(f"oai:bench:{i:07}", BACKLOG_DATESTAMP, f"Record {i}")
                for i in range(first, last)
            )
            token = f"p{len(self.pages) + 1}" if last < records else ""
            self.pages.append(f"{body}<resumptionToken>{token}</resumptionToken>")
        self.live: dict[str, tuple[str, str]] = {}
        self.lock = threading.Lock()

    def page_bytes(self) -> list[bytes]:
        return [_envelope(f"<ListRecords>{p}</ListRecords>") for p in self.pages]

    def add(self, identifier: str, title: str) -> None:
        with self.lock:
            self.live[identifier] = (_now(), title)

    def answer(self, query: dict[str, str]) -> bytes:
        verb = query.get("verb")
        if verb == "Identify":
            return _envelope(
                "<Identify><repositoryName>bench</repositoryName><baseURL>bench</baseURL>"
                "<protocolVersion>2.0</protocolVersion><earliestDatestamp>2020-01-01T00:00:00Z"
                "</earliestDatestamp><deletedRecord>persistent</deletedRecord>"
                "<granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>"
            )
        if verb == "ListMetadataFormats":
            return _envelope(
                "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>"
                f"<schema>x</schema><metadataNamespace>{OAI_DC}</metadataNamespace>"
                "</metadataFormat></ListMetadataFormats>"
            )
        if verb == "ListRecords":
            token = query.get("resumptionToken")
            if token:
                return _envelope(f"<ListRecords>{self.pages[int(token[1:])]}</ListRecords>")
            if "from" not in query:
                return _envelope(f"<ListRecords>{self.pages[0]}</ListRecords>")
            with self.lock:
                found = [(i, d, t) for i, (d, t) in self.live.items() if d >= query["from"]]
            if not found:
                return _envelope('<error code="noRecordsMatch">none</error>')
            return _envelope(f"<ListRecords>{''.join(_record(*r) for r in found)}</ListRecords>")
        if verb == "GetRecord":
            with self.lock:
                datestamp, title = self.live.get(query.get("identifier", ""), ("", ""))
            if not datestamp:
                return _envelope('<error code="idDoesNotExist">none</error>')
            return _envelope(
                f"<GetRecord>{_record(query['identifier'], datestamp, title)}</GetRecord>"
            )
        return _envelope('<error code="badVerb">unknown</error>')

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        repository = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                body = repository.answer(query)
                self.send_response(200)
                self.send_header("Content-Type", "text/xml; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/oai"


def bridge_toml(url: str, interval_s: float) -> str:
    """The bridged topic (apart from the harness's topics, which its Source may post to)."""
    return (
        '[[topics]]\nname = "repo"\n'
        f'[[bridges]]\ntopic = "repo"\nkind = "oai-pmh"\nurl = "{url}"\n'
        f"interval_s = {interval_s}\n"
    )


def parse_phase(pages: list[bytes], records: int, repeat: int) -> dict[str, float]:
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        for body in pages:
            parse_response(body)
        rates.append(records / (time.perf_counter() - started))
    return {
        "records_per_s": round(max(rates)),
        "median_records_per_s": round(sorted(rates)[len(rates) // 2]),
    }


async def catch_up_phase(workdir: Path, url: str, records: int) -> dict[str, float]:
    started = time.perf_counter()
    hub = start_hub(workdir, ["posted"], extra_toml=bridge_toml(url, 60.0))
    ready = time.perf_counter()
    first: tuple[float, float] | None = None
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            while True:
                done = await metric(client, hub.base, "rspush_bridge_changes_total", "repo") or 0
                if first is None and done:
                    first = (time.perf_counter(), done)
                if done >= records:
                    break
                if hub.process.poll() is not None:
                    raise RuntimeError("the hub exited")
                await asyncio.sleep(0.1)
        ended = time.perf_counter()
    finally:
        hub.stop()
    assert first is not None
    steady = (records - first[1]) / max(ended - first[0], 1e-9)
    return {
        "hub_start_s": round(ready - started, 2),
        "seconds_from_ready": round(ended - ready, 2),
        "records_per_s": round(records / (ended - ready)),
        "steady_records_per_s": round(steady),
    }


async def latency_phase(workdir: Path, interval_s: float, samples: int) -> dict[str, Any]:
    repository = StaticRepository(0, 1)
    repository.pages = ["<resumptionToken></resumptionToken>"]
    server, url = repository.serve()
    for i in range(20):
        repository.add(f"oai:live:seed{i}", f"seed {i}")
    hub = start_hub(workdir, ["posted"], extra_toml=bridge_toml(url, interval_s))
    dest, events = workdir / "mirror", workdir / "events.jsonl"
    origin = url.removesuffix("oai")
    agent = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "rs-subscribe"),
            "run",
            hub.base,
            "--dest",
            str(dest),
            "--topic",
            "repo",
            "--map",
            f"{origin}=",
            "--events",
            str(events),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "agent.log").open("wb"),
    )
    delays: list[float] = []
    try:

        def applied() -> dict[str, str]:
            found = {}
            if events.exists():
                for line in events.read_text().splitlines():
                    event = json.loads(line)
                    if event.get("event") == "applied":
                        found[event["uri"]] = event["applied"]
            return found

        deadline = time.monotonic() + 120
        while len(applied()) < 20:  # the agent's baseline and first changes
            if time.monotonic() > deadline:
                raise RuntimeError("the agent did not mirror the seed records")
            await asyncio.sleep(0.1)
        for n in range(samples):
            await asyncio.sleep(random.uniform(0, interval_s))
            identifier = f"oai:live:{n}"
            added = datetime.now(UTC)
            repository.add(identifier, f"live {n}")
            uri = record_uri(url, identifier, "oai_dc")
            deadline = time.monotonic() + interval_s * 5 + 30
            while uri not in (seen := applied()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{identifier} was not applied")
                await asyncio.sleep(0.02)
            delays.append((parse_w3c_datetime(seen[uri]) - added).total_seconds())
    finally:
        agent.terminate()
        agent.wait(30)
        hub.stop()
        server.shutdown()
    delays.sort()
    return {"interval_s": interval_s, "samples": len(delays)} | {
        k: round(v, 3) for k, v in quantiles(delays).items()
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="parse-phase rounds (best kept)")
    parser.add_argument(
        "--interval",
        type=float,
        action="append",
        help="poll interval(s) of the latency phase (default 1)",
    )
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    intervals = args.interval or [1.0]
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    results: dict[str, Any] = {
        "command": command_line("bench.bench_bridges"),
        "checkout": git_state(),
        "records": args.records,
        "page": args.page,
        "load_before": load_before,
    }
    log("building %d records in pages of %d", args.records, args.page)
    repository = StaticRepository(args.records, args.page)
    pages = repository.page_bytes()
    results["backlog_bytes"] = sum(len(p) for p in pages)
    log("parse phase")
    results["parse"] = parse_phase(pages, args.records, args.repeat)
    server, url = repository.serve()
    with tempfile.TemporaryDirectory(prefix="bench-bridges-") as tmp:
        log("catch-up phase")
        try:
            results["catch_up"] = await catch_up_phase(Path(tmp), url, args.records)
        finally:
            server.shutdown()
        results["catch_up"]["ratio_to_parse"] = round(
            results["catch_up"]["steady_records_per_s"] / results["parse"]["records_per_s"], 3
        )
        results["latency"] = []
        for interval in intervals:
            log("latency phase, interval %.1f s", interval)
            workdir = Path(tmp) / f"latency-{interval}"
            workdir.mkdir()
            results["latency"].append(await latency_phase(workdir, interval, args.samples))
    results["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(results, indent=2))
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    asyncio.run(main())
