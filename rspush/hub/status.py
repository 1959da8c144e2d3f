"""The operator status page (``GET /status``): per-topic figures read from the store and from
this process's metrics, and the process's own health.

:func:`collect` gathers (reads only); :func:`render_html` is pure and escapes every value it
writes. Nothing here names a secret or an internal: no tokens, digests, paths, versions or
server error text — Redis is "ok" or "unavailable".
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from rspush.resourcesync.w3cdt import format_w3c_datetime, from_us

from .errors import StoreUnavailable
from .store import TopicStore

REFRESH_S = 5
"""How often the page's script re-fetches the JSON."""


@dataclass(frozen=True, slots=True)
class TopicRef:
    name: str
    private: bool


def _iso(us: int | None) -> str | None:
    return None if us is None else format_w3c_datetime(from_us(us))


def _sample(registry: CollectorRegistry, name: str, topic: str) -> float:
    value = registry.get_sample_value(name, {"topic": topic})
    return 0.0 if value is None else value


def _metric_figures(registry: CollectorRegistry, topic: str) -> dict[str, Any]:
    """This process's counters of ``topic`` (zero for a topic it has not served)."""
    batches = int(_sample(registry, "rspush_push_lag_seconds_count", topic))
    lag_sum = _sample(registry, "rspush_push_lag_seconds_sum", topic)
    return {
        "rotations": int(_sample(registry, "rspush_rotations_total", topic)),
        "subscribers": int(_sample(registry, "rspush_push_subscribers", topic)),
        "push_lag": {
            "batches": batches,
            "mean_s": round(lag_sum / batches, 6) if batches else None,
        },
        "slow_consumer_closes": int(
            _sample(registry, "rspush_push_slow_consumer_closes_total", topic)
        ),
        "websub_delivered": int(_sample(registry, "rspush_websub_delivered_changes_total", topic)),
    }


async def _store_figures(store: TopicStore, topic: str, now_us: int) -> dict[str, Any]:
    meta = await store.meta(topic)
    push_meta = await store.push_meta(topic)
    oldest = await store.oldest(topic)
    oldest_entry = None if oldest is None else await store.entry_at(topic, oldest)
    open_age = None
    if meta.open_count and meta.open_since_us is not None:
        open_age = round(max(now_us - meta.open_since_us, 0) / 1e6, 3)
    return {
        "stream_length": await store.stream_length(topic),
        "last_change": _iso(meta.last_us),
        "open_list": {"entries": meta.open_count, "age_s": open_age},
        "closed_lists": await store.closed_count(topic),
        "retention": {
            "oldest_position": None if oldest is None else str(oldest),
            "oldest_change": None if oldest_entry is None else _iso(oldest_entry.time_us),
            "trimmed_through": None if push_meta.trimmed is None else str(push_meta.trimmed),
            "trimmed_through_time": None
            if push_meta.trimmed_time is None
            else format_w3c_datetime(push_meta.trimmed_time),
        },
    }


def bridge_figures(kind: str, status: dict[str, str]) -> dict[str, Any]:
    """A bridge's figures from its status hash (written by whichever process runs it)."""
    errors = sum(int(v) for k, v in status.items() if k.startswith("errors_"))
    lag = status.get("lag_s")
    return {
        "kind": kind,
        "last_success": status.get("last_success"),
        "synced_through": status.get("synced_through"),
        "lag_s": None if lag is None else float(lag),
        "changes": int(status.get("changes", 0)),
        "errors": errors,
        "errors_by_reason": {
            k.removeprefix("errors_"): int(v) for k, v in status.items() if k.startswith("errors_")
        },
        "last_error": status.get("last_error"),
        "last_error_at": status.get("last_error_at"),
        "last_note": status.get("last_note"),
    }


_UNAVAILABLE_TOPIC: dict[str, Any] = {
    "stream_length": None,
    "last_change": None,
    "open_list": {"entries": None, "age_s": None},
    "closed_lists": None,
    "retention": {
        "oldest_position": None,
        "oldest_change": None,
        "trimmed_through": None,
        "trimmed_through_time": None,
    },
}


async def collect(
    store: TopicStore,
    registry: CollectorRegistry,
    topics: Sequence[TopicRef],
    *,
    started_monotonic: float,
    now_us: int,
    push_connections: Callable[[], int] | None = None,
    bridges: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The status of ``topics`` (the caller has already left out private topics the reader
    may not see). Store figures are ``null`` while Redis is unavailable. ``bridges`` maps each
    bridged topic to its bridge's kind."""
    bridges = bridges or {}
    try:
        await store.ping()
        redis_ok = True
    except (StoreUnavailable, OSError):
        redis_ok = False
    rows: list[dict[str, Any]] = []
    for ref in topics:
        figures: dict[str, Any] = _UNAVAILABLE_TOPIC
        if redis_ok:
            try:
                figures = await _store_figures(store, ref.name, now_us)
            except StoreUnavailable:
                redis_ok = False
        bridge: dict[str, Any] | None = None
        if ref.name in bridges:
            bridge = bridge_figures(bridges[ref.name], {})
            if redis_ok:
                try:
                    state = await store.bridge_state(ref.name)
                    bridge = bridge_figures(bridges[ref.name], state.status)
                except StoreUnavailable:
                    redis_ok = False
        rows.append(
            {"name": ref.name, "private": ref.private}
            | figures
            | _metric_figures(registry, ref.name)
            | {"bridge": bridge}
        )
    process: dict[str, Any] = {
        "redis": "ok" if redis_ok else "unavailable",
        "uptime_s": round(time.monotonic() - started_monotonic, 1),
    }
    if push_connections is not None:
        process["push_connections"] = push_connections()
    delivering = registry.get_sample_value("rspush_websub_delivering")
    if delivering is not None:
        process["websub_delivering"] = int(delivering)
    return {"generated": _iso(now_us), "process": process, "topics": rows}


# --- HTML -----------------------------------------------------------------------------------

_FIGURES: tuple[tuple[str, str], ...] = (
    ("private", "Access"),
    ("stream_length", "Stream length"),
    ("last_change", "Last change"),
    ("open_list.entries", "Open list entries"),
    ("open_list.age_s", "Open list age (s)"),
    ("closed_lists", "Closed lists"),
    ("rotations", "Rotations (this process)"),
    ("subscribers", "Subscribers (this process)"),
    ("push_lag.mean_s", "Mean push lag (s)"),
    ("push_lag.batches", "Batches pushed"),
    ("slow_consumer_closes", "Slow-consumer closes"),
    ("websub_delivered", "WebSub changes delivered (this process)"),
    ("retention.oldest_change", "Oldest change held"),
    ("retention.trimmed_through_time", "Trimmed through"),
    ("bridge.kind", "Bridge"),
    ("bridge.last_success", "Bridge last success"),
    ("bridge.lag_s", "Bridge lag (s)"),
    ("bridge.changes", "Changes bridged"),
    ("bridge.errors", "Bridge errors"),
    ("bridge.last_error", "Bridge last error"),
)
"""(dotted field of a topic's JSON, label) — the script updates cells by field."""

_PROCESS: tuple[tuple[str, str], ...] = (
    ("redis", "Redis"),
    ("uptime_s", "Uptime (s)"),
    ("push_connections", "Push connections"),
    ("websub_delivering", "WebSub subscriptions delivered here"),
)


def _field(row: dict[str, Any], dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def display(field: str, value: Any) -> str:
    """How a figure reads on the page (the script mirrors this)."""
    if field == "private":
        return "private" if value else "public"
    if value is None:
        return "—"
    return str(value)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


_SCRIPT = """
(function () {
  var shown = function (field, value) {
    if (field === "private") return value ? "private" : "public";
    if (value === null || value === undefined) return "\\u2014";
    return String(value);
  };
  var get = function (obj, dotted) {
    return dotted.split(".").reduce(function (v, k) {
      return v && typeof v === "object" ? v[k] : undefined;
    }, obj);
  };
  var note = document.getElementById("live");
  function refresh() {
    fetch(location.pathname, {headers: {Accept: "application/json"}, cache: "no-store"})
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (data) {
        document.querySelectorAll("[data-process]").forEach(function (cell) {
          cell.textContent = shown(cell.dataset.process, data.process[cell.dataset.process]);
        });
        data.topics.forEach(function (topic) {
          var row = document.querySelector('[data-topic="' + CSS.escape(topic.name) + '"]');
          if (!row) return;
          row.querySelectorAll("[data-field]").forEach(function (cell) {
            cell.textContent = shown(cell.dataset.field, get(topic, cell.dataset.field));
          });
        });
        document.getElementById("generated").textContent = data.generated;
        note.textContent = "live: updated every %(refresh)d s";
        note.dataset.state = "live";
      })
      .catch(function (err) {
        note.textContent = "live update failed (" + err.message + "); reload the page";
        note.dataset.state = "failed";
      });
  }
  refresh();
  setInterval(refresh, %(refresh_ms)d);
})();
"""

_STYLE = """
body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1a1a1a; }
h1 { font-size: 1.4em; margin: 0 0 .3em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; }
th { background: #f2f2f2; font-weight: 600; }
td { font-variant-numeric: tabular-nums; white-space: nowrap; }
.topics { display: flex; flex-wrap: wrap; gap: 1em; }
.topic { border: 1px solid #ccc; border-radius: 6px; padding: .6em .8em; width: 27em; }
.topic h3 { font-size: 1.05em; margin: 0 0 .4em; }
.topic table { width: 100%; }
.topic th { width: 45%; }
.meta { color: #555; font-size: .9em; }
"""


def render_html(status: dict[str, Any]) -> str:
    """The page: process figures, then one card per topic. Every value is escaped."""
    process = status["process"]
    process_rows = "".join(
        f'<tr><th scope="row">{_e(label)}</th>'
        f'<td data-process="{_e(key)}">{_e(display(key, process[key]))}</td></tr>'
        for key, label in _PROCESS
        if key in process
    )
    cards = []
    for topic in status["topics"]:
        rows = []
        for field, label in _FIGURES:
            if field.startswith("bridge.") and topic.get("bridge") is None:
                continue  # a topic without a bridge has no bridge rows
            value = _field(topic, field)
            rows.append(
                f'<tr><th scope="row">{_e(label)}</th>'
                f'<td data-field="{_e(field)}">{_e(display(field, value))}</td></tr>'
            )
        cards.append(
            f'<section class="topic" data-topic="{_e(topic["name"])}">'
            f"<h3>{_e(topic['name'])}</h3><table>{''.join(rows)}</table></section>"
        )
    topics = "".join(cards) or "<p>no topics</p>"
    script = _SCRIPT % {"refresh": REFRESH_S, "refresh_ms": REFRESH_S * 1000}
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>rspush hub status</title><style>{_STYLE}</style></head><body>"
        "<h1>rspush hub status</h1>"
        f'<p class="meta">Generated <span id="generated">{_e(status["generated"])}</span>'
        ' · <span id="live" data-state="static">static</span></p>'
        f"<h2>Process</h2><table>{process_rows}</table>"
        f'<h2>Topics</h2><div class="topics">{topics}</div>'
        f"<script>{script}</script>"
        "</body></html>\n"
    )


def render_json(status: dict[str, Any]) -> str:
    return json.dumps(status, separators=(",", ":"))
