"""The URLs a hub names in its documents, from its settings and the sockets it bound.

``[hub] base_url`` and ``[push] url`` name the hub as Destinations reach it (behind a proxy
or a load balancer they differ from where the process listens). Left unset, they follow what
the process actually binds — its host and its bound ports, port 0 included — so that a hub
started with ``--port 9000`` never advertises another hub's default ``:8080``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from .settings import Settings

SOURCE_DESCRIPTION_PATH = "/.well-known/resourcesync"
"""ResourceSync §8 (Source Description): the well-known URI under the hub's base URL."""


def url_host(host: str) -> str:
    """``host`` as a URL's authority names it (RFC 3986 §3.2.2: IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host else host


def reachable_host(host: str) -> str:
    """The address a URL can name for a listener bound to ``host``: a wildcard address
    (0.0.0.0, ::) is no destination, so URLs name the loopback address of its family."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a name such as "localhost"
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return host


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def push_url_for(base_url: str, port: int) -> str:
    """The push endpoint on ``base_url``'s host: ``ws`` beside ``http``, ``wss`` beside
    ``https`` (RFC 6455 §3)."""
    base = urlsplit(base_url)
    scheme = "wss" if base.scheme == "https" else "ws"
    assert base.hostname is not None
    return f"{scheme}://{url_host(base.hostname)}:{port}/"


def advertised(settings: Settings, host: str, port: int, push_port: int | None) -> Settings:
    """``settings`` with ``[hub] base_url`` and ``[push] url`` filled in from the bound
    ``host``/``port``/``push_port`` where the configuration (file or environment) leaves them
    unset; configured values are kept as they are."""
    hub = settings.hub
    if "base_url" not in hub.model_fields_set:
        base_url = f"http://{url_host(reachable_host(host))}:{port}"
        hub = hub.model_copy(update={"base_url": base_url})
    push = settings.push
    if push_port is not None and not push.url:
        push = push.model_copy(update={"url": push_url_for(hub.base_url, push_port)})
    return settings.model_copy(update={"hub": hub, "push": push})


@dataclass(frozen=True)
class Announcement:
    """What ``rs-hub serve`` prints once it serves: where it listens and what it names."""

    http: str
    push: str | None
    base_url: str
    push_url: str | None
    wildcard: bool
    base_url_configured: bool

    def lines(self) -> list[str]:
        listening = f"rs-hub: listening on {self.http} (HTTP)"
        if self.push is not None:
            listening += f" and {self.push} (push)"
        out = [
            listening,
            f"  base URL:           {self.base_url}",
            f"  push:               {self.push_url or 'disabled'}",
            f"  Source Description: {self.base_url}{SOURCE_DESCRIPTION_PATH}",
        ]
        if self.wildcard and not self.base_url_configured:
            out.append(
                "  (listening on every interface: set [hub] base_url, or RSPUSH_HUB__BASE_URL, "
                "to the URL Destinations reach this hub at)"
            )
        return out
