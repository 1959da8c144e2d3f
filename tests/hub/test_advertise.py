"""The URLs documents name: configured ones are kept; unset ones follow the bound sockets."""

from __future__ import annotations

from pathlib import Path

from rspush.hub.advertise import Announcement, advertised
from rspush.hub.settings import Settings, load_settings


def test_unset_urls_follow_the_bound_host_and_ports() -> None:
    settings = advertised(Settings(), "127.0.0.1", 9000, 9001)
    assert settings.hub.base_url == "http://127.0.0.1:9000"
    assert settings.push.url == "ws://127.0.0.1:9001/"


def test_a_wildcard_address_is_named_by_its_loopback() -> None:
    assert advertised(Settings(), "0.0.0.0", 1, 2).hub.base_url == "http://127.0.0.1:1"
    six = advertised(Settings(), "::", 1, 2)
    assert (six.hub.base_url, six.push.url) == ("http://[::1]:1", "ws://[::1]:2/")


def test_configured_urls_are_kept(tmp_path: Path) -> None:
    config = tmp_path / "hub.toml"
    config.write_text('[hub]\nbase_url = "https://hub.example"\n', encoding="utf-8")
    settings = advertised(load_settings(config), "0.0.0.0", 9000, 9001)
    assert settings.hub.base_url == "https://hub.example"
    # the push endpoint on the public host, wss beside https
    assert settings.push.url == "wss://hub.example:9001/"
    pinned = Settings(push={"url": "wss://push.example/"})  # type: ignore[arg-type]
    assert advertised(pinned, "127.0.0.1", 1, 2).push.url == "wss://push.example/"


def test_push_disabled_advertises_no_push_url() -> None:
    assert advertised(Settings(), "127.0.0.1", 1, None).push.url is None


def test_announcement_says_what_to_configure_on_every_interface() -> None:
    lines = Announcement(
        http="http://127.0.0.1:1",
        push=None,
        base_url="http://127.0.0.1:1",
        push_url=None,
        wildcard=True,
        base_url_configured=False,
    ).lines()
    assert lines[0] == "rs-hub: listening on http://127.0.0.1:1 (HTTP)"
    assert "  push:               disabled" in lines
    assert "RSPUSH_HUB__BASE_URL" in lines[-1]
