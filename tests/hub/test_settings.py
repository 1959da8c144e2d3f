"""Loading the hub's settings: a TOML file, the environment over the file, options over the
environment, errors, and the defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from rspush.hub.auth import token_sha256
from rspush.hub.settings import Settings, load_settings

CONFIG = """
redis_prefix = "from-file"
[hub]
base_url = "http://file.example:8080/"
[[topics]]
name = "dataset1"
[[sources]]
name = "museum"
token_sha256 = "{digest}"
topics = ["dataset1"]
[limits]
changelist_max_entries = 500
retention_s = 60
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("RSPUSH_"):
            monkeypatch.delenv(name)
    path = tmp_path / "hub.toml"
    path.write_text(CONFIG.format(digest=token_sha256("t").upper()))
    return path


def test_load_settings_from_toml(config: Path) -> None:
    settings = load_settings(config)
    assert settings.hub.base_url == "http://file.example:8080"  # trailing slash dropped
    assert [t.name for t in settings.topics] == ["dataset1"]
    assert settings.sources[0].token_sha256 == token_sha256("t")
    assert settings.limits.changelist_max_entries == 500
    assert settings.limits.retention_s == 60
    assert settings.limits.max_body_bytes == 10 * 1024 * 1024  # a default
    assert settings.redis_prefix == "from-file"
    assert settings.redis_url is None


def test_env_beats_the_file_and_options_beat_env(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSPUSH_HUB__BASE_URL", "https://env.example")
    monkeypatch.setenv("RSPUSH_REDIS_PREFIX", "from-env")
    monkeypatch.setenv("RSPUSH_REDIS_URL", "redis://env:6379/0")
    monkeypatch.setenv("RSPUSH_LIMITS__RETENTION_S", "5")
    monkeypatch.setenv("RSPUSH_APPENDFSYNC", "always")
    settings = load_settings(config)
    assert settings.hub.base_url == "https://env.example"
    assert settings.redis_prefix == "from-env"
    assert settings.redis_url == "redis://env:6379/0"
    assert settings.limits.retention_s == 5
    assert settings.appendfsync == "always"
    overridden = load_settings(config, redis_url="redis://cli:1/0", port=0, host=None)
    assert overridden.redis_url == "redis://cli:1/0"
    assert overridden.port == 0
    assert overridden.host == "127.0.0.1"  # None options do not override


def test_load_settings_errors(config: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")
    text = config.read_text()
    for bad in (
        text.replace('name = "dataset1"', 'name = "bad name"', 1),
        text.replace('topics = ["dataset1"]', 'topics = ["other"]'),
        text.replace("changelist_max_entries = 500", "changelist_max_entries = 50001"),
        text.replace('"http://file.example:8080/"', '"ftp://file.example"'),
        text.replace(token_sha256("t").upper(), "not-hex"),
        text + '\n[[topics]]\nname = "dataset1"\n',
        "unknown_setting = 1\n" + text,
    ):
        config.write_text(bad)
        with pytest.raises(ValidationError):
            load_settings(config)


def test_settings_without_a_file_are_the_defaults(config: Path) -> None:
    settings = load_settings(None)
    assert settings == Settings()
    assert settings.limits.changelist_max_entries <= 50_000
