"""The Docker sidecar without Docker: the Dockerfile, the AnythingLLM compose example and the
MCP servers entry agree with each other, and the image's command works when built the image's way.

Docker is not available where the suite runs, so the image is stood in for by a folder: the
Dockerfile is read (stages, COPY, ENV, WORKDIR, EXPOSE, HEALTHCHECK, ENTRYPOINT, CMD), its build
stage's sources are copied and built into a wheel with `pip wheel --no-deps`, the wheel (with the
extras the Dockerfile names) goes into a fresh venv, and every absolute path the Dockerfile names
is placed under a temporary root. The image's own command, config and health check then run
against it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.test_http_downstream import INITIALIZE, LEGACY_HEADERS, Proxy
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "anythingllm"
TOKEN = "sidecar-test-token-0d9e4c1b7a"
PLACEHOLDER = "<FRUGAL_AUTH_TOKEN>"


# -- reading the Dockerfile ----------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, its arguments)

    def all(self, instruction: str) -> list[str]:
        return [arguments for name, arguments in self.steps if name == instruction]

    def last(self, instruction: str) -> str:
        found = self.all(instruction)
        assert found, f"the stage FROM {self.base} has no {instruction}"
        return found[-1]


def read_dockerfile(path: Path = ROOT / "Dockerfile") -> list[Stage]:
    """The stages of a Dockerfile, continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, arguments = line.partition(" ")
        instruction, arguments = instruction.upper(), arguments.strip()
        if instruction == "ARG" and not stages:
            key, _, value = arguments.partition("=")
            args[key] = value
        elif instruction == "FROM":
            words = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], arguments).split()
            stages.append(Stage(words[0], words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            stages[-1].steps.append((instruction, arguments))
    return stages


def exec_form(arguments: str) -> list[str]:
    words = json.loads(arguments)
    assert isinstance(words, list) and all(isinstance(word, str) for word in words), arguments
    return words


def healthcheck(stage: Stage) -> list[str]:
    """The HEALTHCHECK's command (exec form), its options skipped."""
    options, _, command = stage.last("HEALTHCHECK").partition("CMD ")
    assert all(option.startswith("--") for option in options.split()), options
    return exec_form(command)


def default_command(stage: Stage) -> list[str]:
    return exec_form(stage.last("ENTRYPOINT")) + exec_form(stage.last("CMD"))


def exposed_port(stage: Stage) -> int:
    (port,) = stage.all("EXPOSE")
    return int(port.split("/")[0])


# -- the image as a folder -----------------------------------------------------------------------


@dataclass
class Image:
    root: Path  # stands for the image's /
    env: dict[str, str]  # its ENV, absolute paths placed under root
    workdir: Path
    command: list[str]  # ENTRYPOINT + CMD
    health: list[str]
    port: int

    def run(self, command: list[str]) -> list[str]:
        """`command` as the container would start it: in WORKDIR (run it with the image's env)."""
        chdir_then_exec = "import os, sys; os.chdir(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"
        return [sys.executable, "-c", chdir_then_exec, str(self.workdir), *command]

    def start(self, command: list[str], **env: str) -> Proxy:
        proxy = Proxy(self.run(command), {**self.env, **env})
        proxy.wait_listening()
        return proxy


def inside(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def image_env(root: Path, stage: Stage) -> dict[str, str]:
    """The stage's ENV, each absolute path (also inside PATH-like lists) placed under `root`."""
    env: dict[str, str] = {}
    for arguments in stage.all("ENV"):
        for pair in shlex.split(arguments):
            key, _, value = pair.partition("=")
            parts = []
            for part in value.split(":"):
                if part in ("$PATH", "${PATH}"):
                    parts.append(os.environ["PATH"])
                else:
                    parts.append(str(inside(root, part)) if part.startswith("/") else part)
            env[key] = ":".join(parts)
    return env


def copy_into(root: Path, workdir: str, arguments: str) -> None:
    """One COPY from the build context (the checkout) into the image folder."""
    *sources, dest = arguments.split()
    target = inside(root, dest if dest.startswith("/") else f"{workdir}/{dest}")
    for source in sources:
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            file = target / origin.name if dest.endswith("/") else target
            file.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, file)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The Dockerfile carried out on this machine, its absolute paths under a temporary root."""
    root = tmp_path_factory.mktemp("image")
    *builders, final = read_dockerfile()
    (build,) = builders
    # The build stage: its COPY lines give the sources; its RUN builds the wheel. It runs with this
    # venv's setuptools instead of an isolated build environment, which saves a download.
    workdir = build.last("WORKDIR")
    for arguments in build.all("COPY"):
        copy_into(root, workdir, arguments)
    (run,) = build.all("RUN")
    wheels = re.search(r"pip wheel .*--no-deps --wheel-dir (\S+) \.$", run)
    assert wheels, f"the build stage builds no wheel of the checkout: {run}"
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir"),
            *(str(inside(root, wheels.group(1))), str(inside(root, workdir))),
        ],
        capture_output=True,
        text=True,
        timeout=paced(120),
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = inside(root, wheels.group(1)).glob("frugal_proxy-*.whl")
    # The final stage: a fresh venv where the Dockerfile makes one, the wheel with the extras it
    # names installed into it with its dependencies (resolved now, from the pip cache or index).
    # This venv's pip does the installing (`--python`), which skips ensurepip in the new venv.
    install = " ".join(final.all("RUN"))
    venv = re.search(r"python -m venv (\S+)", install)
    extras = re.search(r'pip install [^"]*"\$\{wheel\}(\[[\w,]+\])?"', install)
    assert venv and extras, f"the final stage installs no wheel into a venv: {install}"
    venv_dir = inside(root, venv.group(1))
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], timeout=paced(60), check=False
    )
    assert made.returncode == 0
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(venv_dir / "bin" / "python"), "install", "--quiet"),
            f"{wheel}{extras.group(1) or ''}",
        ],
        capture_output=True,
        text=True,
        timeout=paced(170),
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    workdir = "/"
    for instruction, arguments in final.steps:
        if instruction == "WORKDIR":
            workdir = arguments
            inside(root, workdir).mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY" and not arguments.startswith("--from="):
            copy_into(root, workdir, arguments)
    env = image_env(root, final)
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)  # useradd --create-home
    return Image(root, env, inside(root, workdir), default_command(final), healthcheck(final), exposed_port(final))


# -- the image's command -------------------------------------------------------------------------

# Building the stand-in image (a wheel, a fresh venv and the dependencies installed into it) takes
# 20-40 s on two busy cores before the first of these tests starts; they share it (module scope).
SLOW = pytest.mark.timeout(240)


def on_any_port(command: list[str], port: int) -> list[str]:
    """The command listening on a free port: others may use the image's port on this machine."""
    bind = f"0.0.0.0:{port}"
    assert bind in command, f"the image does not listen on {bind}: {command}"
    return [word if word != bind else "0.0.0.0:0" for word in command]


def bound_port(proxy: Proxy) -> int:
    port = urlsplit(proxy.url).port
    assert port is not None, proxy.url
    return port


def authorized(token: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=paced(30))


@SLOW
def test_the_dockerfile_runs_as_a_user_and_takes_the_token_from_the_environment(image: Image) -> None:
    final = read_dockerfile()[-1]
    assert final.last("USER").split(":")[0] not in ("root", "0")
    assert image.command[:2] == ["frugal-proxy", "serve"]
    assert "--stateless" in image.command
    assert "FRUGAL_AUTH_TOKEN" not in image.env  # a secret is never baked into the image
    assert Path(image.env["FRUGAL_CONFIG"]).is_file()


@SLOW
async def test_the_image_serves_healthz_and_tools_to_a_bearer_of_the_token(image: Image, mode: str) -> None:
    proxy = image.start(on_any_port(image.command, image.port), FRUGAL_AUTH_TOKEN=TOKEN)
    try:
        port = bound_port(proxy)
        base = f"http://127.0.0.1:{port}"
        with deadline(40):
            async with httpx2.AsyncClient() as plain:
                health = await plain.get(f"{base}/healthz")
                assert health.status_code == 200
                assert health.json()["status"] == "ok"
                refused = await plain.post(f"{base}/mcp", json=INITIALIZE, headers=LEGACY_HEADERS)
                assert refused.status_code == 401
            async with (
                authorized(TOKEN) as http,
                Client(
                    streamable_http_client(f"{base}/mcp", http_client=http),
                    mode=mode,
                ) as client,
            ):
                names = [tool.name for tool in (await client.list_tools()).tools]
                assert {"add", "echo"} <= set(names)
                result = await client.call_tool("add", {"a": 2, "b": 3})
                assert not result.is_error
                assert result.structured_content == {"result": 5}
    finally:
        proxy.stop()
    assert not any(TOKEN in line for line in proxy.lines)


@SLOW
def test_the_health_check_passes_while_the_proxy_serves_and_fails_once_it_stops(image: Image) -> None:
    proxy = image.start(on_any_port(image.command, image.port), FRUGAL_AUTH_TOKEN=TOKEN)
    check = [word.replace(f":{image.port}/", f":{bound_port(proxy)}/") for word in image.health]
    assert check != image.health, f"the health check does not ask the image's port: {image.health}"
    try:
        passed = subprocess.run(image.run(check), env=image.env, capture_output=True, timeout=paced(30), check=False)
    finally:
        proxy.stop()
    assert passed.returncode == 0, passed.stderr
    failed = subprocess.run(image.run(check), env=image.env, capture_output=True, timeout=paced(30), check=False)
    assert failed.returncode != 0


@SLOW
def test_without_the_token_the_image_refuses_to_start(image: Image) -> None:
    done = subprocess.run(
        image.run(image.command), env=image.env, capture_output=True, text=True, timeout=paced(30), check=False
    )
    assert done.returncode == 2
    assert "frugal-proxy: error: refusing to listen on 0.0.0.0 without authentication" in done.stderr
    assert "FRUGAL_AUTH_TOKEN" in done.stderr
    assert "listening on" not in done.stderr


@SLOW
async def test_the_compose_command_accepts_anythingllm_by_service_name(image: Image) -> None:
    service = compose()["services"]["frugal-proxy"]
    command = on_any_port([*exec_form(read_dockerfile()[-1].last("ENTRYPOINT")), *service["command"]], image.port)
    proxy = image.start(command, FRUGAL_AUTH_TOKEN=TOKEN)
    entry = mcp_servers_entry()
    headers = {key: value.replace(PLACEHOLDER, TOKEN) for key, value in entry["headers"].items()}
    url = f"http://127.0.0.1:{bound_port(proxy)}{urlsplit(entry['url']).path}"
    as_anythingllm = {**LEGACY_HEADERS, **headers, "Host": urlsplit(entry["url"]).netloc}
    try:
        with deadline(30):
            async with httpx2.AsyncClient() as http:
                answered = await http.post(url, json=INITIALIZE, headers=as_anythingllm)
                assert answered.status_code == 200, answered.text
                assert answered.json()["result"]["serverInfo"]["name"]
                # The bind is not loopback and a token is required, so any Host passes (the token is
                # the protection against DNS rebinding there); a browser Origin is still checked.
                stranger = await http.post(url, json=INITIALIZE, headers={**as_anythingllm, "Host": "elsewhere:8765"})
                assert stranger.status_code == 200, stranger.text
                browser = {**as_anythingllm, "Origin": "https://evil.example"}
                refused = await http.post(url, json=INITIALIZE, headers=browser)
                assert refused.status_code == 403 and refused.json()["error"] == "origin_not_allowed"
                unauthorized = await http.post(
                    url, json=INITIALIZE, headers={**LEGACY_HEADERS, "Host": "elsewhere:8765"}
                )
                assert unauthorized.status_code == 401
    finally:
        proxy.stop()


# -- the compose example -------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((EXAMPLE / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def mcp_servers_entry() -> dict[str, Any]:
    data = json.loads((EXAMPLE / "anythingllm_mcp_servers.json").read_text())
    (name,) = data["mcpServers"]
    assert name == "frugal"
    entry: dict[str, Any] = data["mcpServers"][name]
    return entry


def option(command: list[str], name: str) -> str:
    assert command.count(name) == 1, f"{name} not given once in {command}"
    return command[command.index(name) + 1]


def volumes(service: dict[str, Any]) -> dict[str, str]:
    """Container path → host path of a service's bind mounts."""
    found = {}
    for volume in service.get("volumes", []):
        host, container, *_ = volume.split(":")
        found[container] = host
    return found


def test_compose_wires_one_network_port_token_and_storage() -> None:
    services = compose()["services"]
    anythingllm, sidecar = services["anythingllm"], services["frugal-proxy"]
    final = read_dockerfile()[-1]
    # The image is built from this checkout's Dockerfile.
    assert (EXAMPLE / sidecar["build"]["context"]).resolve() == ROOT
    # One network, declared, with both services on it.
    (network,) = compose()["networks"]
    assert network in anythingllm["networks"] and network in sidecar["networks"]
    # AnythingLLM: its image, UI port and storage.
    assert anythingllm["image"].split(":")[0] == "mintplexlabs/anythingllm"
    assert "3001:3001" in anythingllm["ports"]
    storage = anythingllm["environment"]["STORAGE_DIR"]
    host_storage = volumes(anythingllm)[storage]
    assert anythingllm["depends_on"]["frugal-proxy"]["condition"] == "service_healthy"
    # The sidecar: the image's command plus the service name as an allowed Host, no host port.
    command = sidecar["command"]
    assert command == [*exec_form(final.last("CMD")), "--allowed-host", "frugal-proxy"]
    assert option(command, "--allowed-host") == "frugal-proxy"
    assert option(command, "--http") == f"0.0.0.0:{exposed_port(final)}"
    assert "ports" not in sidecar
    # The token comes from .env, never from the file itself.
    assert sidecar["environment"]["FRUGAL_AUTH_TOKEN"].startswith("${FRUGAL_AUTH_TOKEN:?")
    assert re.search(r"^FRUGAL_AUTH_TOKEN=$", (EXAMPLE / ".env.example").read_text(), re.MULTILINE)
    assert {".env", "storage/"} <= set((EXAMPLE / ".gitignore").read_text().split())
    # The sidecar sees AnythingLLM's plugins folder where ANYTHINGLLM_STORAGE_DIR says.
    plugins = f"{sidecar['environment']['ANYTHINGLLM_STORAGE_DIR']}/plugins"
    assert volumes(sidecar)[plugins] == f"{host_storage}/plugins"
    # The MCP servers entry reaches the sidecar by service name, on its port and path.
    entry = mcp_servers_entry()
    url = urlsplit(entry["url"])
    assert entry["type"] == "streamable"
    assert (url.scheme, url.hostname, url.port, url.path) == ("http", "frugal-proxy", exposed_port(final), "/mcp")
    assert entry["headers"] == {"Authorization": f"Bearer {PLACEHOLDER}"}


def test_the_images_config_refuses_private_addresses() -> None:
    """The image is network-facing: its default config turns `routing.domains.deny_private` on."""
    from frugal_proxy import config

    loaded = config.loads((ROOT / "examples" / "docker" / "frugal.toml").read_text())
    assert loaded.routing.domains.deny_private is True


def test_the_shipped_entry_is_what_mcp_install_writes(tmp_path: Path) -> None:
    entry = mcp_servers_entry()
    sidecar = compose()["services"]["frugal-proxy"]
    storage = tmp_path / "storage"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "ANYTHINGLLM_STORAGE_DIR": str(storage),
        "FRUGAL_AUTH_TOKEN": TOKEN,
    }
    # The command the example's README runs inside the sidecar (`docker compose run --rm frugal-proxy ...`).
    readme = (EXAMPLE / "README.md").read_text()
    shown = re.search(r"docker compose run --rm frugal-proxy (mcp install [^\n`]+)", readme)
    assert shown, "the README does not show the install command"
    args = shlex.split(shown.group(1))
    assert option(args, "--http") == entry["url"]
    assert option(args, "--token-env") in sidecar["environment"]
    done = subprocess.run(
        [sys.executable, "-m", "frugal_proxy", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=paced(30),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written = (storage / "plugins" / "anythingllm_mcp_servers.json").read_text()
    shipped = (EXAMPLE / "anythingllm_mcp_servers.json").read_text()
    assert written == shipped.replace(PLACEHOLDER, TOKEN)
    assert TOKEN not in done.stdout + done.stderr


def test_dockerignore_lets_in_exactly_what_the_dockerfile_copies() -> None:
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for stage in read_dockerfile():
        for arguments in stage.all("COPY"):
            if not arguments.startswith("--from="):
                copied.update(arguments.split()[:-1])
    assert copied == admitted
    for source in copied:
        assert (ROOT / source).exists(), source
