"""docker/compose.yaml and docker/Dockerfile, checked without a Docker engine (SPEC §13).

The compose file parses; every service has a health check and a pinned image; every command
(and every health check that runs ``celery``) is one Celery's real command line accepts, parsed
by click in a process of its own with the service's environment; the example app takes every
setting from that environment; the Dockerfile pins its base image and runs as a non-root user.
tests/docker runs the image itself where an engine answers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker" / "compose.yaml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
EXAMPLE = REPO / "examples" / "compose"
APP_SOURCE = (EXAMPLE / "proj.py").read_text()
VERSION = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)[1]  # type: ignore[index]

# Options that would configure the app from the command line or a file instead of the
# environment (celery's global ones and the subcommands').
CONFIG_OPTIONS = {"-b", "--broker", "--result-backend", "--config", "--workdir", "--loader"}
READ_BY_PACKAGE = {"DURABLE_BEAT_URL", "DURABLE_BEAT_API_TOKENS"}  # settings.py, web/auth.py


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from docker/Dockerfile (they run the example app)."""
    return {name: s for name, s in services(compose).items() if "build" in s}


def celery_args(argv: list[str]) -> list[str]:
    assert argv[0] == "celery", argv
    return argv[1:]


def health_argv(service: dict[str, Any]) -> tuple[str, list[str]]:
    """The health check's kind (CMD, CMD-SHELL) and its argv, with compose's ``$$`` unescaped."""
    test = service["healthcheck"]["test"]
    kind, rest = test[0], test[1:]
    if kind == "CMD-SHELL":
        return kind, shlex.split(rest[0].replace("$$", "$"))
    return kind, list(rest)


def parsed_by_celery(commands: list[list[str]], env: dict[str, str]) -> list[dict[str, Any]]:
    """tests/support/cli_accepts.py's verdict on each command, with this environment only."""
    full_env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{EXAMPLE}{os.pathsep}{REPO}",
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.cli_accepts"],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        env=full_env,
        cwd=EXAMPLE,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(proc.stdout))


def test_it_parses_with_the_services_the_spec_names(compose: dict[str, Any]) -> None:
    names = set(services(compose))
    assert {"postgres", "redis", "serve", "flower"} <= names
    commands = {n: s["command"] for n, s in ours(compose).items()}
    beats = [n for n, c in commands.items() if "beat" in c and "durable-beat" not in c]
    workers = [n for n, c in commands.items() if "worker" in c]
    assert len(beats) == 2 and len(workers) == 2, commands


def test_every_service_has_a_health_check(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name


def test_every_image_is_pinned(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        image = service.get("image")
        assert image, f"{name}: no image name"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned"
    for name, service in ours(compose).items():
        assert service["image"].endswith(f":{VERSION}"), f"{name}: tag the package version"


def test_every_command_is_one_celery_accepts(compose: dict[str, Any]) -> None:
    """Each service's command and each celery health check, parsed by the real CLI with the
    service's own environment (so the app module loads from it alone)."""
    for name, service in ours(compose).items():
        commands = [celery_args(service["command"])]
        _, check = health_argv(service)
        if check[0] == "celery":
            commands.append([a.replace("$HOSTNAME", "host") for a in celery_args(check)])
        env = {k: str(v) for k, v in service["environment"].items()}
        verdicts = parsed_by_celery(commands, env)
        for argv, verdict in zip(commands, verdicts, strict=True):
            error = verdict["error"]
            assert error is None, f"{name}: celery {shlex.join(argv)}: {error}"
        if "-S" in commands[0]:
            assert verdicts[0]["scheduler"] == "celery_durable_beat.scheduler.Scheduler", name


def test_flower_options_are_flower_s(compose: dict[str, Any]) -> None:
    """`celery flower` hands its options to tornado, so click cannot vet them: check each
    ``--option`` and ``FLOWER_*`` variable against Flower's own list."""
    from flower.options import default_options

    flower = services(compose)["flower"]
    args = celery_args(flower["command"])
    assert args[args.index("-A") + 2] == "flower"
    for arg in args[args.index("flower") + 1 :]:
        assert arg.startswith("--") and arg[2:].split("=")[0] in default_options, arg
    for var in flower["environment"]:
        if var.startswith("FLOWER_"):
            assert var[len("FLOWER_") :].lower() in default_options, var


def test_health_checks_probe_what_the_service_serves(compose: dict[str, Any]) -> None:
    """Beats: /healthz on their metrics port (their loop turns); serve: /healthz on its port;
    workers: a ping of their own node name; Flower: its /healthcheck."""
    for name, service in ours(compose).items():
        command, env = service["command"], service["environment"]
        kind, check = health_argv(service)
        if "worker" in command:
            node = command[command.index("-n") + 1].split("@")[0]
            assert check[check.index("-d") + 1] == f"{node}@$HOSTNAME", name
            continue
        assert kind == "CMD" and check[:2] == ["python", "-c"], name
        compile(check[2], f"{name} health check", "exec")
        url = re.search(r"http://127\.0\.0\.1:(\d+)(/\S*?)'", check[2])
        assert url, f"{name}: {check[2]}"
        port, path = url.group(1), url.group(2)
        if "durable-beat" in command:
            assert (port, path) == (command[command.index("--port") + 1], "/healthz"), name
        elif "flower" in command:
            assert (port, path) == (env["FLOWER_PORT"], "/healthcheck"), name
        else:
            assert (port, path) == (env["DURABLE_BEAT_METRICS_PORT"], "/healthz"), name


def test_configured_by_environment_variables_only(compose: dict[str, Any]) -> None:
    """No config file, no config option; the app reads each variable it is given, and the
    settings it ends up with are the environment's."""
    for name, service in ours(compose).items():
        for key in ("env_file", "configs", "secrets", "volumes"):
            assert key not in service, f"{name}: {key} (configure through environment only)"
        assert not CONFIG_OPTIONS & set(service["command"]), name
        for var in service["environment"]:
            known = var in READ_BY_PACKAGE or var.startswith("FLOWER_") or var in APP_SOURCE
            assert known, f"{name}: nothing reads {var}"
    beat = ours(compose)["beat-a"]
    env = {k: str(v) for k, v in beat["environment"].items()}
    app = parsed_by_celery([celery_args(beat["command"])], env)[0]["app"]
    assert app["broker_url"] == env["CELERY_BROKER_URL"]
    assert app["durable_beat_url"] == env["DURABLE_BEAT_URL"]
    assert app["durable_beat_metrics_port"] == int(env["DURABLE_BEAT_METRICS_PORT"])
    assert app["durable_beat_flower_url"] == env["DURABLE_BEAT_FLOWER_URL"]
    assert app["timezone"] == env["CELERY_TIMEZONE"]
    assert app["schedules"], "the example app has schedules"


def test_the_app_refuses_to_start_without_its_environment() -> None:
    verdict = parsed_by_celery([["-A", "proj", "worker"]], {})[0]
    assert verdict["error"] and "CELERY_BROKER_URL" in verdict["error"]


def dockerfile_stages() -> list[dict[str, Any]]:
    """Each FROM with its base, name and the user it ends with (inherited from its base)."""
    stages: list[dict[str, Any]] = []
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("FROM "):
            parts = line.split()
            base, name = parts[1], parts[3] if len(parts) > 3 else None
            parent = next((s for s in stages if s["name"] == base), None)
            user = parent["user"] if parent else None
            stages.append({"base": base, "name": name, "user": user, "external": not parent})
        elif line.startswith("USER "):
            stages[-1]["user"] = line.split()[1]
    return stages


def test_the_dockerfile_pins_its_base_and_runs_as_a_non_root_user(
    compose: dict[str, Any],
) -> None:
    stages = dockerfile_stages()
    for stage in stages:
        if stage["external"]:
            _, _, tag = stage["base"].rpartition(":")
            assert re.fullmatch(r"\d+\.\d+\.\d+-slim-\w+", tag), f"pin a slim tag: {stage['base']}"
        user = (stage["user"] or "root").split(":")[0]
        assert user not in ("root", "0"), f"stage {stage['name']} runs as {user}"
    targets = {s["build"]["target"] for s in ours(compose).values()}
    assert targets <= {s["name"] for s in stages}, targets
    assert stages[-1]["name"] == "app", "the default target (last stage) is the app"
    text = DOCKERFILE.read_text()
    assert "'.[postgres,redis,web,metrics]'" in text
    assert "COPY examples/compose/proj.py" in text
