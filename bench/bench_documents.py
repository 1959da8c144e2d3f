"""Benchmark of the document layer: parse, validate and serialise a Change List.

Run from the repository root::

    .venv/bin/python -m bench.bench_documents [--entries 50000] [--repeat 7] [--json out.json]

A realistic ResourceSync 1.1 Change List is built in code (seeded, so every run measures the
same bytes), serialised once, and then every case below is timed in the same process, the
cases interleaved round by round so drift of the machine hits them all alike:

- ``lxml fromstring``: ``lxml.etree.fromstring(data)``, the baseline every figure is a
  ratio against;
- ``lxml pull events``: the parser's own pull-parser settings fed the same chunks
  (``CHUNK_BYTES``), top-level elements cleared, no models built (information: what the XML
  side of ``parse_document`` costs at least);
- ``parse_document``, ``validate``, ``parse + validate``, ``serialise``;
- ``schema_errors``: the XSD check, for information (``--no-schema`` skips it).

Timing: ``time.perf_counter`` around one call; the best and the median of ``--repeat`` runs
are reported, and the ratios use the medians. ``time.process_time`` of the same calls is
recorded too (CPU time: on a shared machine it moves less than wall time).

GC: the benchmark's own fixtures (the parsed document that validate and serialise use) are
moved out of the collector's sight with ``gc.freeze()`` once built, so a case pays for the
objects *it* allocates and not for the size of the benchmark's heap; ``gc.collect()`` runs
before every timed call and the collector stays *enabled* during it, as in a real process.
``--gc-off`` disables it during the timed call instead, as ``timeit`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lxml import etree

from rspush.resourcesync import (
    MAX_ENTRIES,
    Document,
    Entry,
    Link,
    Metadata,
    parse_document,
    serialise,
    validate,
)
from rspush.resourcesync.parser import CHUNK_BYTES, _new_parser
from rspush.resourcesync.schema import schema_errors

from .harness.results import write_json

SEED = 20240601
BASE = "https://data.example.org"
START = datetime(2024, 3, 1, tzinfo=UTC)
# (media type, share) of resources; deleted ones carry no fixity, length or type.
MEDIA_TYPES = [
    ("text/html", 0.45),
    ("application/pdf", 0.2),
    ("image/jpeg", 0.15),
    ("application/xml", 0.1),
    ("application/json", 0.1),
]
CHANGES = [("created", 0.3), ("updated", 0.6), ("deleted", 0.1)]
DESCRIBEDBY_SHARE = 0.25
BASELINE = "lxml fromstring"


# --------------------------------------------------------------------------- the document


def build_change_list(entries: int, seed: int = SEED) -> Document:
    """A Change List of ``entries`` changes in forward chronological order.

    Each ``<url>`` has ``<loc>``, ``<lastmod>`` and ``<rs:md change datetime hash length
    type>`` (md5 and sha-256, hex); a quarter carry ``<rs:ln rel="describedby">``. Deleted
    resources have neither ``<lastmod>`` nor fixity. The document has ``rs:ln rel="up"`` and
    ``rs:md capability="changelist" from=...``.
    """
    rng = random.Random(seed)
    types, type_weights = zip(*MEDIA_TYPES, strict=True)
    changes, change_weights = zip(*CHANGES, strict=True)
    moment = START
    items: list[Entry] = []
    for index in range(entries):
        moment += timedelta(seconds=rng.randint(1, 40), microseconds=rng.randrange(0, 10**6, 1000))
        change = rng.choices(changes, change_weights)[0]
        media = rng.choices(types, type_weights)[0]
        collection = rng.randrange(200)
        loc = f"{BASE}/collection/{collection:03d}/item/{index:06d}.{media.rpartition('/')[2]}"
        links: tuple[Link, ...] = ()
        if change == "deleted":
            md = Metadata(change=change, datetime=moment)
            lastmod = None
        else:
            content = f"{loc} {moment.isoformat()} {rng.random()}".encode()
            md = Metadata(
                change=change,
                datetime=moment,
                hash=(
                    f"md5:{hashlib.md5(content).hexdigest()} "
                    f"sha-256:{hashlib.sha256(content).hexdigest()}"
                ),
                length=rng.randint(200, 5_000_000),
                type=media,
            )
            lastmod = moment - timedelta(seconds=rng.randint(0, 3600))
            if rng.random() < DESCRIBEDBY_SHARE:
                links = (
                    Link(
                        rel="describedby",
                        href=f"{BASE}/metadata/{collection:03d}/{index:06d}.jsonld",
                        modified=moment,
                        type="application/ld+json",
                    ),
                )
        items.append(Entry(loc=loc, lastmod=lastmod, md=md, links=links))
    return Document(
        root="urlset",
        md=Metadata(capability="changelist", from_=START),
        links=(Link(rel="up", href=f"{BASE}/.well-known/capabilitylist.xml"),),
        entries=tuple(items),
    )


# --------------------------------------------------------------------------- the cases


def pull_events(data: bytes) -> int:
    """The XML side of ``parse_document`` alone: same parser options, same chunks, every
    top-level child cleared when it ends; no models. Returns the entry count."""
    parser = _new_parser()
    depth = 0
    count = 0
    root: Any = None
    view = memoryview(data)
    starts = range(0, len(view), CHUNK_BYTES)
    for start in [*starts, None]:
        if start is None:
            parser.close()
        else:
            parser.feed(bytes(view[start : start + CHUNK_BYTES]))
        events: Any = parser.read_events()  # lxml-stubs type the events too loosely
        for event, el in events:
            if event == "start":
                depth += 1
                if depth == 1:
                    root = el
                continue
            depth -= 1
            if depth == 1:
                count += 1
                el.clear(keep_tail=False)
                while el.getprevious() is not None:
                    del root[0]
    return count


@dataclass
class Result:
    name: str
    runs: list[float]  # wall seconds (perf_counter), one per run
    cpu_runs: list[float]  # CPU seconds (process_time) of the same runs
    best: float
    median: float
    cpu_best: float
    entries_per_s: float  # from the median
    ratio: float  # median / median of the baseline
    best_ratio: float  # best / best of the baseline


def time_once(func: Callable[[], object], *, gc_off: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    gc.collect()
    if gc_off:
        gc.disable()
    try:
        cpu = time.process_time()
        start = time.perf_counter()
        result = func()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        if gc_off:
            gc.enable()
    del result
    return elapsed, cpu


def run_cases(
    cases: dict[str, Callable[[], object]], repeat: int, entries: int, *, gc_off: bool
) -> list[Result]:
    runs: dict[str, list[float]] = {name: [] for name in cases}
    cpu_runs: dict[str, list[float]] = {name: [] for name in cases}
    for func in cases.values():  # warm-up: imports, caches (the XSD), allocator
        func()
    for _ in range(repeat):
        for name, func in cases.items():
            wall, cpu = time_once(func, gc_off=gc_off)
            runs[name].append(wall)
            cpu_runs[name].append(cpu)
    base, base_best = statistics.median(runs[BASELINE]), min(runs[BASELINE])
    results = []
    for name, times in runs.items():
        median = statistics.median(times)
        results.append(
            Result(
                name=name,
                runs=times,
                cpu_runs=cpu_runs[name],
                best=min(times),
                median=median,
                cpu_best=min(cpu_runs[name]),
                entries_per_s=entries / median,
                ratio=median / base,
                best_ratio=min(times) / base_best,
            )
        )
    return results


# --------------------------------------------------------------------------- reporting


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "lxml": etree.__version__,
        "libxml2": ".".join(map(str, etree.LIBXML_VERSION)),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.system(),
        "loadavg_before": list(os.getloadavg()),
    }


def print_table(
    results: list[Result], env: dict[str, Any], meta: dict[str, Any], figures: dict[str, float]
) -> None:
    print(
        f"python {env['python']}, lxml {env['lxml']} (libxml2 {env['libxml2']}), "
        f"{env['cpu_count']} cpus, {env['system']} {env['machine']}"
    )
    load = ", ".join(f"{x:.2f}" for x in env["loadavg_before"])
    after = ", ".join(f"{x:.2f}" for x in meta["loadavg_after"])
    print(f"load average before: {load}; after: {after}")
    print(
        f"Change List: {meta['entries']:,} entries, {meta['bytes'] / 1e6:.1f} MB; "
        f"{meta['repeat']} runs per case, gc {'off' if meta['gc_off'] else 'on'} while timed"
    )
    print()
    header = (
        f"{'case':<18} {'best ms':>9} {'median ms':>10} {'cpu best ms':>12} "
        f"{'entries/s':>11} {'x baseline':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.name:<18} {r.best * 1e3:>9.1f} {r.median * 1e3:>10.1f} "
            f"{r.cpu_best * 1e3:>12.1f} {r.entries_per_s:>11,.0f} {r.ratio:>11.2f}"
        )
    print()
    print("figures (wall time against bare lxml fromstring of the same bytes, median / best):")
    print(
        f"  (parse + validate) / fromstring = {figures['parse_validate_ratio']:.2f}"
        f" / {figures['parse_validate_best_ratio']:.2f}"
    )
    print(
        f"  serialise / fromstring          = {figures['serialise_ratio']:.2f}"
        f" / {figures['serialise_best_ratio']:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_documents",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--entries", type=int, default=MAX_ENTRIES, help="entries, at most 50000 (the default)"
    )
    parser.add_argument("--repeat", type=int, default=7, help="runs per case (default 7)")
    parser.add_argument("--json", metavar="PATH", help="also write results as JSON ('-': stdout)")
    parser.add_argument("--no-schema", action="store_true", help="skip the XSD check case")
    parser.add_argument(
        "--gc-off", action="store_true", help="disable the GC while timing (default: enabled)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.entries <= MAX_ENTRIES or args.repeat < 1:
        parser.error(f"--entries must be 1..{MAX_ENTRIES} (the Sitemap limit); --repeat >= 1")

    document = build_change_list(args.entries)
    data = serialise(document)
    # Sanity: the bytes are what we mean to measure — a valid document that round-trips.
    parsed = parse_document(data)
    problems = validate(parsed)
    if parsed != document or problems:
        print(f"benchmark document does not round-trip cleanly: {problems[:3]}", file=sys.stderr)
        return 1
    if not args.no_schema and (errors := schema_errors(data)):
        print(f"benchmark document is not XSD-valid: {errors[:3]}", file=sys.stderr)
        return 1
    if pull_events(data) != args.entries + 2:  # entries, the document rs:ln and rs:md
        print("pull-event baseline saw the wrong number of elements", file=sys.stderr)
        return 1
    env = environment()
    del document, problems
    gc.collect()
    gc.freeze()  # fixtures (``parsed``, ``data``) out of the collector's sight; see above

    cases: dict[str, Callable[[], object]] = {
        BASELINE: lambda: etree.fromstring(data),
        "lxml pull events": lambda: pull_events(data),
        "parse_document": lambda: parse_document(data),
        "validate": lambda: validate(parsed),
        "parse + validate": lambda: validate(parse_document(data)),
        "serialise": lambda: serialise(parsed),
    }
    if not args.no_schema:
        cases["schema_errors"] = lambda: schema_errors(data)

    results = run_cases(cases, args.repeat, args.entries, gc_off=args.gc_off)
    by_name = {r.name: r for r in results}
    figures = {
        "parse_validate_ratio": by_name["parse + validate"].ratio,
        "serialise_ratio": by_name["serialise"].ratio,
        "parse_validate_best_ratio": by_name["parse + validate"].best_ratio,
        "serialise_best_ratio": by_name["serialise"].best_ratio,
    }
    meta = {
        "entries": args.entries,
        "bytes": len(data),
        "repeat": args.repeat,
        "gc_off": args.gc_off,
        "timer": "time.perf_counter",
        "baseline": BASELINE,
        "loadavg_after": list(os.getloadavg()),
    }
    # With the JSON on stdout, the table goes to stderr.
    with contextlib.redirect_stdout(sys.stderr if args.json == "-" else sys.stdout):
        print_table(results, env, meta, figures)
    if args.json:
        payload = {
            "benchmark": "documents",
            "environment": env,
            "meta": meta,
            "figures": figures,
            "results": [asdict(r) for r in results],
        }
        write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
