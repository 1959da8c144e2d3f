"""The deployment files (Dockerfile, compose.yaml, deploy/haproxy.cfg, the compose hub
config) checked without a container engine: the compose file against the Compose
Specification's JSON schema, every rspush command line against its script's ``--help``,
the load balancer against the hub's ports, the hub config as the hub loads it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from rspush.hub.server import RunningHub
from rspush.hub.settings import Settings, load_settings
from tests.support.hubs import hub, hub_factory

__all__ = ["hub", "hub_factory"]  # the fixtures

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(sys.executable).parent
RSPUSH_SCRIPTS = {"rs-hub", "rs-subscribe", "rs-publish", "rs-validate"}
DUMMY_DIGEST = "0" * 64
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::?[-?+][^}]*)?\}")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load((ROOT / "compose.yaml").read_text())
    return data


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def _instruction(name: str) -> list[str]:
    """The last ``name`` instruction's exec-form arguments (a JSON list)."""
    joined = _dockerfile().replace("\\\n", " ")  # continuation lines
    lines = re.findall(rf"^{name}\s+(\[.*\])\s*$", joined, re.MULTILINE)
    assert lines, f"no exec-form {name} in the Dockerfile"
    args: list[str] = json.loads(lines[-1])
    return args


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` with ``env``."""
    return _INTERPOLATION.sub(lambda m: env[m["name"]], text)


def test_compose_file_follows_the_compose_specification() -> None:
    schema_file = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    jsonschema.validate(_compose(), schema, cls=jsonschema.Draft7Validator)


def test_the_schema_check_can_fail() -> None:
    schema_file = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    broken = _compose()
    broken["services"]["hub"]["deploy"]["replica"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft7Validator)


def _command_lines() -> list[tuple[str, list[str]]]:
    """(service, argv) of every service that runs an rspush console script."""
    entrypoint, default_command = _instruction("ENTRYPOINT"), _instruction("CMD")
    lines = []
    for name, service in _services().items():
        if service.get("image") != _services()["hub"]["image"]:
            continue
        argv = service.get("entrypoint", entrypoint)
        command = service.get("command", default_command)
        argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        argv += shlex.split(command) if isinstance(command, str) else list(command)
        lines.append((name, argv))
    return lines


def test_services_run_rspush_scripts() -> None:
    lines = dict(_command_lines())
    assert lines["hub"][:2] == ["rs-hub", "serve"]
    assert lines["subscriber"][:2] == ["rs-subscribe", "run"]


@pytest.mark.parametrize(("service", "argv"), _command_lines())
def test_every_option_a_service_uses_is_in_its_help(service: str, argv: list[str]) -> None:
    script, subcommand, *args = argv
    assert script in RSPUSH_SCRIPTS
    helped = subprocess.run(
        [SCRIPTS / script, subcommand, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    listed = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", helped))
    used = {arg.split("=", 1)[0] for arg in args if arg.startswith("--")}
    assert used, f"{service}: no options?"
    assert used <= listed, f"{service}: {sorted(used - listed)} not in {script} --help"


def test_the_dockerfile_image() -> None:
    text = _dockerfile()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(stages) >= 2, "a build stage and a runtime stage"
    assert stages[-1] == "python:3.11-slim"
    assert re.search(r"python -m build|pip wheel", text)
    runtime = text.split("\nFROM ")[-1]
    assert re.search(r"pip install[^\n]*rspush\[hub\][^\n]*\.whl|rspush\[hub\] @ file://", runtime)
    assert "COPY rspush" not in runtime, "the runtime stage installs the wheel only"
    users = re.findall(r"^USER\s+(\S+)", runtime, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^EXPOSE\s+8080\s+8081\s*$", runtime, re.MULTILINE)
    joined = runtime.replace("\\\n", " ")  # continuation lines
    health = re.search(r"^HEALTHCHECK[^\n]*", joined, re.MULTILINE)
    assert health is not None and "/readyz" in health[0] and "urllib" in health[0]
    assert _instruction("ENTRYPOINT") == ["rs-hub", "serve"]
    assert "--config" in _instruction("CMD")
    assert "pip" not in " ".join(_instruction("ENTRYPOINT") + _instruction("CMD"))


def test_compose_builds_and_scales_the_hub_behind_the_load_balancer() -> None:
    services = _services()
    hub = services["hub"]
    assert hub["build"] in (".", {"context": "."})
    assert hub["deploy"]["replicas"] == 3
    assert "ports" not in hub, "replicas cannot share fixed host ports"
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source")
            assert not str(source).startswith("."), "no bind-mounted source tree"
    lb = services["lb"]
    assert lb["image"].startswith("haproxy")
    assert {p.split(":")[-1] for p in lb["ports"]} == {"8080", "8081"}
    redis = services["redis"]
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert redis["volumes"] and "healthcheck" in redis
    subscriber = services["subscriber"]
    assert subscriber["depends_on"]["hub"]["condition"] == "service_healthy"
    assert subscriber["restart"] == "unless-stopped"
    assert "http://lb:8080" in subscriber["command"]


def _compose_hub_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The hub's settings as a compose replica loads them: the config file compose mounts,
    the environment it sets (interpolated with a dummy digest), the options it passes."""
    hub = _services()["hub"]
    config_name = next(c["source"] for c in hub["configs"] if c["target"] == "/etc/rspush/hub.toml")
    config = ROOT / _compose()["configs"][config_name]["file"]
    for name in list(os.environ):
        if name.startswith("RSPUSH_"):
            monkeypatch.delenv(name)
    for name, value in hub["environment"].items():
        monkeypatch.setenv(name, _interpolate(value, {"RSPUSH_SOURCE_TOKEN_SHA256": DUMMY_DIGEST}))
    argv = hub["command"]
    redis_url = argv[argv.index("--redis-url") + 1]
    return load_settings(config, redis_url=redis_url, host=argv[argv.index("--host") + 1])


def test_the_compose_hub_config_loads_with_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = _compose_hub_settings(monkeypatch)
    assert [(s.name, s.token_sha256, s.topics) for s in settings.sources] == [
        ("compose", DUMMY_DIGEST, ["dataset1"])
    ]
    assert settings.redis_url == "redis://redis:6379/0"
    # Documents name the load balancer, not a replica.
    assert settings.hub.base_url == "http://lb:8080"
    assert settings.push.url == "ws://lb:8081/"


def test_no_token_or_digest_in_the_compose_files() -> None:
    for name in ("compose.yaml", "examples/compose-hub.toml", ".env.example"):
        text = (ROOT / name).read_text()
        assert not re.search(r"[0-9a-f]{64}", text), name
        assert "demo-token" not in text, name
    assert "examples/hub.toml" not in (ROOT / "compose.yaml").read_text()


def _haproxy() -> str:
    return (ROOT / "deploy" / "haproxy.cfg").read_text()


def test_the_load_balancer_reaches_every_hub_port(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _compose_hub_settings(monkeypatch)
    targets = {
        int(port)
        for port in re.findall(r"^\s*server(?:-template)?\s.*\bhub:(\d+)", _haproxy(), re.MULTILINE)
    }
    assert targets == {settings.port, settings.push.port}
    binds = {int(port) for port in re.findall(r"^\s*bind\s+\S*:(\d+)", _haproxy(), re.MULTILINE)}
    public = {
        int(re.search(r":(\d+)", url)[1])  # type: ignore[index]
        for url in (settings.hub.base_url, settings.push.url or "")
    }
    assert public <= binds
    assert re.search(r"^\s*timeout tunnel\s", _haproxy(), re.MULTILINE), "WebSockets idle"
    assert "/readyz" in _haproxy()


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_its_config() -> None:
    checked = subprocess.run(
        ["haproxy", "-c", "-f", ROOT / "deploy" / "haproxy.cfg"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def _health(argv: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(*argv)
    async with asyncio.timeout(30):
        return await process.wait()


async def test_the_image_health_check_probes_readyz(hub: RunningHub) -> None:
    argv = _instruction("HEALTHCHECK.*CMD")
    assert argv[0] == "python"
    argv[0] = sys.executable
    # The image's hub listens on 8080; this one on a free port.
    assert any("http://127.0.0.1:8080/readyz" in arg for arg in argv)
    ready = [arg.replace("http://127.0.0.1:8080", hub.url.rstrip("/")) for arg in argv]
    assert await _health(ready) == 0
    nothing = [arg.replace("http://127.0.0.1:8080", "http://127.0.0.1:9") for arg in argv]
    assert await _health(nothing) != 0
