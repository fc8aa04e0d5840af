"""docker/: compose.yaml and the Dockerfile hold together, and point at code that exists.

No Docker engine is needed: the files are parsed, the URLs checked with the platform's own env parsers.
`docker compose config` runs too where the compose plugin is installed.
"""

from __future__ import annotations

import ast
import base64
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tools import pyproject_requirements

yaml = pytest.importorskip("yaml")

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER = REPO_ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
ENV_EXAMPLE = DOCKER / ".env.example"

APP_SERVICES = ("migrate", "web", "worker", "beat")
TREE_SERVICES = ("router", "executor-a", "executor-b")  # the serving tree, one agent image
SERVICES = ("postgres", "clickhouse", "redis", *APP_SERVICES, *TREE_SERVICES)
PER_PROCESS_ENV = {"PROMETHEUS_MULTIPROC_DIR", "WORKER_METRICS_PORT"}
ENV_KEYS = ("DATABASE_URL", "CLICKHOUSE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "TREEMETER_SIGNING_KEY")

EXAMPLE_VALUES = {
    "POSTGRES_PASSWORD": "pgpass123",
    "CLICKHOUSE_PASSWORD": "chpass456",
    "SECRET_KEY": "s3cret",
    "TREEMETER_SIGNING_KEY": base64.b64encode(bytes(range(32))).decode(),
}

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${NAME}, ${NAME:-default}, ${NAME:?error} and $$, enough for these files."""

    def replace(match: re.Match[str]) -> str:
        name, op, arg = match.group("name", "op", "arg")
        given = variables.get(name, "")
        if given:
            return given
        if op == ":?":
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg if op == ":-" else ""

    return _VARIABLE.sub(replace, value.replace("$$", "\0")).replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    result: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = result.setdefault(match.group(2) or match.group(1), [])
        if current is not None:
            current.append(line)
    return result


def test_all_services_are_there(services: dict[str, dict[str, Any]]) -> None:
    assert set(SERVICES) <= set(services)


def test_backing_service_images(services: dict[str, dict[str, Any]]) -> None:
    assert services["postgres"]["image"] == "postgres:17"
    assert services["redis"]["image"] == "redis:7"
    image, _, tag = services["clickhouse"]["image"].partition(":")
    assert image == "clickhouse/clickhouse-server"
    assert tuple(int(part) for part in tag.split(".")[:2]) >= (25, 8)


def test_app_services_share_one_image_build(
    services: dict[str, dict[str, Any]], stages: dict[str, list[str]]
) -> None:
    first = services[APP_SERVICES[0]]
    for name in APP_SERVICES:
        assert services[name]["build"] == first["build"], name
        assert services[name]["image"] == first["image"], name
    assert first["build"]["target"] == "app"
    agent = services["router"]
    assert agent["build"]["target"] == "agent"
    assert agent["image"] != first["image"]
    for name in TREE_SERVICES:
        assert (services[name]["build"], services[name]["image"]) == (agent["build"], agent["image"]), name
    for build in (first["build"], agent["build"]):
        context = (DOCKER / build["context"]).resolve()
        assert context == REPO_ROOT
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE
        assert build["target"] in stages


def test_the_env_anchor_carries_the_platform_settings(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    env = compose["x-env"]
    assert set(ENV_KEYS) <= set(env)
    assert env["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    assert env["CLICKHOUSE_URL"].startswith("http://default:")
    assert env["CLICKHOUSE_URL"].endswith("@clickhouse:8123/treemeter")
    assert "@postgres:5432/treemeter" in env["DATABASE_URL"]
    for name in APP_SERVICES:
        environment = services[name]["environment"]
        assert {key: environment.get(key) for key in env} == env, name
        # Beyond the anchor, only per-process metrics settings (docs/observability.md).
        assert set(environment) - set(env) <= PER_PROCESS_ENV, name
    for name in TREE_SERVICES:
        environment = services[name]["environment"]
        assert "DATABASE_URL" not in environment, f"{name} gets no platform secrets"
        assert environment["TREEMETER_PLATFORM_URL"] == "http://web:8000"
        assert environment["TREEMETER_AGENT_ID"] == name


def test_the_platform_parsers_accept_the_env(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from config import env as platform_env

    for key, value in compose["x-env"].items():
        monkeypatch.setenv(key, interpolate(str(value), EXAMPLE_VALUES))
    database = platform_env.database()
    assert (database.embedded, database.host, database.port, database.name) == (
        False,
        "postgres",
        "5432",
        "treemeter",
    )
    assert (database.user, database.password) == ("treemeter", "pgpass123")
    clickhouse = urlsplit(platform_env.clickhouse_url())
    assert (clickhouse.hostname, clickhouse.port, clickhouse.password) == ("clickhouse", 8123, "chpass456")
    assert platform_env.broker_url() == "redis://redis:6379/0"
    assert platform_env.ed25519_seed("TREEMETER_SIGNING_KEY", Path("/nonexistent")) == bytes(range(32))
    assert platform_env.boolean("DEBUG", True) is False
    assert "web" in platform_env.csv_list("ALLOWED_HOSTS", []), "the agent calls http://web:8000"


def test_every_variable_is_in_the_env_example() -> None:
    documented = set(re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    used = {match.group("name") for match in _VARIABLE.finditer(COMPOSE.read_text())}
    assert used <= documented
    required = {
        match.group("name") for match in _VARIABLE.finditer(COMPOSE.read_text()) if match.group("op") == ":?"
    }
    assert required == set(EXAMPLE_VALUES)
    assert (DOCKER / ".gitignore").read_text().splitlines().count(".env") == 1, "docker/.env stays out of git"


def test_start_order(services: dict[str, dict[str, Any]]) -> None:
    def conditions(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name].get("depends_on", {}).items()}

    assert conditions("migrate") == {"postgres": "service_healthy", "clickhouse": "service_healthy"}
    for name in ("web", "worker", "beat"):
        assert conditions(name)["migrate"] == "service_completed_successfully", name
        assert conditions(name)["redis"] == "service_healthy", name
    for name in TREE_SERVICES:
        assert conditions(name)["web"] == "service_healthy", name
    # the job queue's broker before the router and its workers
    assert conditions("router")["redis"] == conditions("jobs-worker")["redis"] == "service_healthy"
    assert conditions("jobs-worker")["router"] == "service_started"
    router, worker = services["router"]["command"], services["jobs-worker"]["command"]
    assert router[router.index("--jobs-broker") + 1] == worker[worker.index("--broker") + 1]
    assert services["migrate"]["restart"] == "no"
    for name in services:
        for dep, condition in conditions(name).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} to be healthy: it needs a healthcheck"
                )


def test_commands(services: dict[str, dict[str, Any]]) -> None:
    web = services["web"]["command"]
    assert web[0] == "gunicorn" and "config.wsgi:application" in web
    assert "0.0.0.0:8000" in web
    assert services["worker"]["command"][:4] == ["celery", "-A", "config", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "config", "beat"]
    migrate = " ".join(services["migrate"]["command"])
    assert "python manage.py migrate " in migrate and "python manage.py migrate_clickhouse" in migrate
    router = services["router"]["command"]
    assert router[:4] == ["python", "-m", "compute_agents", "router"] and "0.0.0.0" in router  # noqa: S104 - inside its container
    trusted = [interpolate(router[i + 1], {}) for i, arg in enumerate(router) if arg == "--executor"]
    assert [pair.partition("=")[0] for pair in trusted] == ["executor-a", "executor-b"]
    for name in ("executor-a", "executor-b"):
        serve = " ".join(services[name]["command"])
        assert "python -m compute_agents serve" in serve and "--router-url http://router:8100" in serve
        assert "--quota-leases" in serve, "several executors serve one key: leases"
    volumes = set()
    for name in TREE_SERVICES:
        key_folder = str(Path(services[name]["environment"]["TREEMETER_AGENT_KEY_FILE"]).parent)
        [volume] = [v for v in services[name]["volumes"] if v.endswith(f":{key_folder}")]
        volumes.add(volume)
    assert len(volumes) == len(TREE_SERVICES), "each agent its own key volume"


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                return True
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
    return False


def test_referenced_modules_exist() -> None:
    platform = REPO_ROOT / "platform"
    assert _defines(platform / "config" / "wsgi.py", "application"), "config.wsgi:application"
    assert _defines(platform / "config" / "celery.py", "app"), "celery -A config"
    assert (REPO_ROOT / "manage.py").is_file()
    assert (platform / "clickhouse_store" / "management" / "commands" / "migrate_clickhouse.py").is_file()
    assert not (platform / "__init__.py").exists(), "platform/ must stay a folder, not a package"


def test_the_agent_cli_exists() -> None:
    assert (REPO_ROOT / "compute_agents" / "__main__.py").is_file(), "python -m compute_agents"


def test_dockerfile(stages: dict[str, list[str]]) -> None:
    text = DOCKERFILE.read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert "PYTHONPATH=/app:/app/platform" in text
    assert {"app", "agent"} <= set(stages)
    for target in ("app", "agent"):
        users = [line.split()[1] for line in stages[target] if line.startswith("USER ")]
        assert users and users[-1] not in {"root", "0"}, f"{target} runs as a non-root user"
        assert any(line.startswith("COPY . /app") for line in stages[target])
    app = "\n".join(stages["app"])
    assert "manage.py collectstatic --noinput" in app
    assert stages["app"][-1] == (
        'CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--access-logfile", "-"]'
    )
    agent = "\n".join(stages["agent"])
    assert "--index-url https://download.pytorch.org/whl/cpu" in agent
    assert stages["agent"][-1] == 'CMD ["python", "-m", "compute_agents"]'
    assert "vllm" in text, "the comment pointing GPU hosts to the vllm extra"
    # Files the build copies by name must exist in the build context.
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE):
        *sources, _ = line.split()
        for source in sources:
            if source != ".":
                assert (REPO_ROOT / source).exists(), source


def test_the_build_context_leaves_out_local_state() -> None:
    ignored = set((DOCKER / "Dockerfile.dockerignore").read_text().split())
    assert {".git", ".venv", "var", "docker/.env"} <= ignored


def test_pyproject_requirements_lists_the_pins() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pyproject_requirements.requirements(data) == project["dependencies"]
    agent = project["optional-dependencies"]["agent"]
    torch = pyproject_requirements.requirements(data, extras=["agent"], base=False, only=["torch"])
    rest = pyproject_requirements.requirements(data, extras=["agent"], base=False, exclude=["torch"])
    assert torch == [r for r in agent if r.startswith("torch==")] and len(torch) == 1
    assert sorted(torch + rest) == sorted(agent)
    assert pyproject_requirements.project_name("Celery[redis]==5.7.0") == "celery"
    assert pyproject_requirements.project_name("psycopg_Binary>=3") == "psycopg-binary"
    with pytest.raises(ValueError, match="no extra"):
        pyproject_requirements.requirements(data, extras=["nope"])


def test_pyproject_requirements_runs_as_a_plain_script() -> None:
    """The Dockerfile runs it on a bare python image: by path, standard library only."""
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            str(REPO_ROOT / "tools" / "pyproject_requirements.py"),
            str(REPO_ROOT / "pyproject.toml"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert result.stdout.splitlines() == project["dependencies"]


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="the docker compose plugin is not installed")
def test_docker_compose_config(tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in EXAMPLE_VALUES.items()))
    subprocess.run(
        ["docker", "compose", "--env-file", str(env_file), "-f", str(COMPOSE), "config", "--quiet"],
        check=True,
        timeout=60,
    )
