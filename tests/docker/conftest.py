"""pytest-celery's container fixtures, for this folder only, set up for the example app.

The containers: pytest-celery's Redis broker (pinned to the compose file's Redis), a PostgreSQL
store, a worker of the image ``docker/Dockerfile`` builds (the compose file's image, running
``examples/compose/proj.py``), and two beat containers of the same image. Nothing is mounted:
the image holds the app and takes every setting from the environment, as in compose.

pytest-celery's plugin is not loaded globally (``-p no:celery`` in pyproject.toml): it would
replace Celery's in-process ``celery_worker`` fixture with a container everywhere. Its fixtures
are imported here instead, so they exist for tests/docker alone. tests/conftest.py deselects
this folder (saying why) when no Docker engine answers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pytest_celery import *  # noqa: F403 - pytest-celery's fixtures, for this folder only
from pytest_celery import (
    CeleryBackendCluster,
    CeleryBrokerCluster,
    CeleryTestContainer,
    CeleryWorkerContainer,
    RedisTestBroker,
)
from pytest_docker_tools import container, fxtr, image_or_build

REPO = Path(__file__).resolve().parents[2]
REDIS_IMAGE = "redis:7.4.1-bookworm"  # the compose file's
POSTGRES_IMAGE = "postgres:16.6-bookworm"  # the compose file's
METRICS_PORT = 9808
BEAT_COMMAND = ["celery", "-A", "proj", "beat", "-S", "celery_durable_beat.Scheduler", "-l", "INFO"]


class DurableBeatWorker(CeleryWorkerContainer):
    """The example app's worker, from docker/Dockerfile: no pytest-celery inside the image."""

    @classmethod
    def command(cls, *args: str, **kwargs: Any) -> list[str]:
        return [
            "celery", "-A", "proj", "worker", "-E", "-P", "solo",
            "-l", cls.log_level(), "-n", f"{cls.worker_name()}@%h", *args,
        ]  # fmt: skip

    @classmethod
    def worker_name(cls) -> str:
        return "docker-worker"


class BeatContainer(CeleryTestContainer):
    """A beat of the example app; ``leads()`` asks its own /metrics, from inside the container."""

    @property
    def ready_prompt(self) -> str:
        return "beat: Starting..."

    def leads(self) -> bool | None:
        """True/False from ``durable_beat_leader``; None while /metrics does not answer."""
        probe = (
            "import urllib.request;print(urllib.request.urlopen("
            f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=3).read().decode())"
        )
        code, output = self.exec_run(["python", "-c", probe])
        found = re.search(r"^durable_beat_leader (\S+)$", output.decode(), re.M)
        return None if code != 0 or not found else float(found.group(1)) == 1.0


class PostgresContainer(CeleryTestContainer):
    """Ready once the server answers over TCP (the image's init-time server does not)."""

    def ready(self) -> bool:
        if not super(CeleryTestContainer, self).ready():
            return False
        code, _ = self.exec_run(["pg_isready", "-U", "beat", "-d", "beat", "-h", "127.0.0.1"])
        return bool(code == 0)

    @property
    def hostname(self) -> str:
        return str(self.attrs["Config"]["Hostname"])


# DURABLE_BEAT_DOCKER_IMAGE names an image already built from docker/Dockerfile (target app):
# scripts/check-containers builds it once, with no network inside the build, for compose and for
# these tests. Unset, the tests build it themselves (pip then reads the package index).
durable_beat_image = image_or_build(
    "DURABLE_BEAT_DOCKER_IMAGE",
    path=str(REPO),
    dockerfile="docker/Dockerfile",
    target="app",
    tag="celery-durable-beat-example:tests-docker",
)

postgres_store = container(
    image=POSTGRES_IMAGE,
    environment={"POSTGRES_USER": "beat", "POSTGRES_PASSWORD": "beat", "POSTGRES_DB": "beat"},
    network="{default_pytest_celery_network.name}",
    wrapper_class=PostgresContainer,
    timeout=90,
)


@pytest.fixture
def default_redis_broker_image() -> str:
    return REDIS_IMAGE


@pytest.fixture
def celery_broker_cluster(celery_redis_broker: RedisTestBroker) -> Any:
    """pytest-celery's Redis broker alone (not its RabbitMQ parametrization)."""
    cluster = CeleryBrokerCluster(celery_redis_broker)
    yield cluster
    cluster.teardown()


@pytest.fixture
def celery_backend_cluster() -> CeleryBackendCluster | None:
    return None  # the example app keeps no results


@pytest.fixture
def durable_beat_env(celery_broker_cluster_config: dict[str, Any], postgres_store: Any) -> dict:
    """The example app's environment, as docker/compose.yaml gives it."""
    return {
        "CELERY_BROKER_URL": celery_broker_cluster_config["urls"][0],
        "DURABLE_BEAT_URL": f"postgresql+psycopg://beat:beat@{postgres_store.hostname}:5432/beat",
        "DURABLE_BEAT_METRICS_PORT": str(METRICS_PORT),
        "PARTNER_API_PASSWORD": "docker-suite",
    }


@pytest.fixture
def default_worker_container_cls() -> type[CeleryWorkerContainer]:
    return DurableBeatWorker


default_worker_container = container(
    image="{durable_beat_image.id}",
    environment=fxtr("durable_beat_env"),
    network="{default_pytest_celery_network.name}",
    wrapper_class=DurableBeatWorker,
    timeout=90,
    command=fxtr("default_worker_command"),
)

beat_a = container(
    image="{durable_beat_image.id}",
    environment=fxtr("durable_beat_env"),
    network="{default_pytest_celery_network.name}",
    wrapper_class=BeatContainer,
    timeout=90,
    command=BEAT_COMMAND,
)

beat_b = container(
    image="{durable_beat_image.id}",
    environment=fxtr("durable_beat_env"),
    network="{default_pytest_celery_network.name}",
    wrapper_class=BeatContainer,
    timeout=90,
    command=BEAT_COMMAND,
)
