"""`make image-test`: build the CPU image with podman, serve from it, chat, stop it.

Phases (each timed): tools (apt-get installs podman & co. if missing), base image
(debootstrap + `podman import`, first run only), build (deploy/Containerfile.cpu),
start (container up until `/health` answers), chat (one completion through the
`openai` client), stop (SIGTERM; must exit cleanly within `server.shutdown_grace_s`).

NOTE: podman runs with its own config and storage under $SWITCHBOARD_PODMAN_DIR
(default /var/lib/switchboard-podman); nothing global is changed. Builds use the host
network and the container slirp4netns, so no CNI bridge or iptables rule is created.
The test container is always removed; the images stay in that storage as the layer
cache of the next run (`make image-clean` removes all of it; pip's wheel cache, a build
cache mount, stays in /var/tmp/buildah-cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("SWITCHBOARD_PODMAN_DIR", "/var/lib/switchboard-podman"))
BASE_TAG = "docker.io/library/debian:bookworm-slim"  # what Containerfile.cpu says FROM
IMAGE = "localhost/switchboard-cpu:dev"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# Debian package -> a command it provides (installed only when the command is missing).
TOOLS = {"podman": "podman", "buildah": "buildah", "runc": "runc", "slirp4netns": "slirp4netns",
         "fuse-overlayfs": "fuse-overlayfs", "uidmap": "newuidmap", "debootstrap": "debootstrap",
         "catatonit": "catatonit"}
# NOTE: this machine lacks CAP_SYS_RESOURCE (podman's default rlimits fail), has hybrid
# cgroups without systemd (crun and the systemd cgroup manager fail).
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""

_times: list[tuple[str, float]] = []


@contextmanager
def phase(name: str) -> Iterator[None]:
    print(f"== {name}", flush=True)
    t0 = time.monotonic()
    try:
        yield
    finally:
        _times.append((name, time.monotonic() - t0))
        print(f"== {name}: {_times[-1][1]:.1f} s", flush=True)


def sh(*cmd: str, check: bool = True, capture: bool = False, env: Mapping[str, str] | None = None,
       stdin: IO[Any] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, text=True, capture_output=capture, env=env, stdin=stdin)


def podman(*args: str, check: bool = True, capture: bool = False, stdin: IO[Any] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return sh("podman", *args, check=check, capture=capture, stdin=stdin)


def ensure_tools() -> None:
    missing = [pkg for pkg, cmd in TOOLS.items() if shutil.which(cmd) is None]
    if missing:
        if os.geteuid() != 0:
            sys.exit(f"image-test: needs root to install {' '.join(missing)} (and to run rootful podman)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh("apt-get", "update", "-q", env=env)
        sh("apt-get", "install", "-y", "-q", "--no-install-recommends", *missing, env=env)
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "containers.conf").write_text(CONTAINERS_CONF)
    (STATE / "storage.conf").write_text(STORAGE_CONF.format(root=STATE))
    os.environ["CONTAINERS_CONF"] = str(STATE / "containers.conf")
    os.environ["CONTAINERS_STORAGE_CONF"] = str(STATE / "storage.conf")


def debian_mirror() -> str:
    for line in Path("/etc/apt/sources.list.d/debian.sources").read_text().splitlines():
        if line.startswith("URIs:"):
            return line.split()[1]
    return "http://deb.debian.org/debian"


def ensure_base() -> None:
    if podman("image", "exists", BASE_TAG, check=False).returncode == 0:
        print(f"   {BASE_TAG} exists (remove it to refresh the Debian base)")
        return
    with tempfile.TemporaryDirectory(dir=STATE, prefix="rootfs-") as rootfs:
        sh("debootstrap", "--variant=minbase", "bookworm", rootfs, debian_mirror())
        with subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE) as tar:
            podman("import", "--change", 'CMD ["/bin/bash"]', "-", BASE_TAG, stdin=tar.stdout)
        if tar.returncode:
            sys.exit("image-test: tar of the debootstrap root failed")


def build_context(dest: Path) -> None:
    """The repo's tracked and untracked-but-not-ignored files (never .venv or caches)."""
    out = sh("git", "-C", str(REPO), "ls-files", "-z", "-c", "-o", "--exclude-standard", capture=True).stdout
    with tarfile.open(dest / "ctx.tar", "w") as tar:
        for rel in sorted(set(filter(None, out.split("\0")))):
            if (REPO / rel).is_file():
                tar.add(REPO / rel, arcname=rel)
    with tarfile.open(dest / "ctx.tar") as tar:
        tar.extractall(dest / "ctx", filter="tar")


def build() -> None:
    # NOTE: rebuilding the dependency layer holds the old image, the build container and the
    # new layer (~12 GB each) at once, plus the wheel cache (~5 GB).
    free_gb = shutil.disk_usage(STATE).free / 2**30
    if free_gb < 45:
        print(f"   warning: {free_gb:.0f} GB free; rebuilding the dependency layer needs ~45 GB", flush=True)
    with tempfile.TemporaryDirectory(prefix="switchboard-ctx-") as tmp:
        build_context(Path(tmp))
        secret = ["--secret", f"id=hostca,src={HOST_CA}"] if HOST_CA.is_file() else []
        podman("build", "--layers", "--network=host", *secret, "-f", "deploy/Containerfile.cpu",
               "-t", IMAGE, f"{tmp}/ctx")
    # NOTE: layers a rebuild superseded are ~12 GB each; only the current image's are kept.
    podman("image", "prune", "-f", capture=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) for an AF_INET socket
        return port


def wait_healthy(name: str, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = podman("inspect", "-f", "{{.State.Running}}", name, capture=True).stdout.strip()
        if state != "true":
            raise RuntimeError(f"container exited before /health answered (running={state})")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"/health did not answer within {timeout_s:.0f} s")


def chat(base_url: str) -> str:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="unused", timeout=120, max_retries=0)
    model = client.models.list().data[0].id
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name one colour."}],
        max_tokens=12, temperature=0)
    text = reply.choices[0].message.content or ""
    if not text.strip() or reply.usage is None or reply.usage.completion_tokens < 1:
        raise RuntimeError(f"empty completion: {reply!r}")
    return text


def stop(name: str, grace_s: float) -> None:
    """SIGTERM; the server must exit by itself, with status 0, within ``grace_s``."""
    t0 = time.monotonic()
    podman("kill", "--signal", "TERM", name)
    while podman("inspect", "-f", "{{.State.Running}}", name, capture=True).stdout.strip() == "true":
        if time.monotonic() - t0 > grace_s:
            raise RuntimeError(f"still running {grace_s:.0f} s after SIGTERM")
        time.sleep(0.2)
    code = podman("inspect", "-f", "{{.State.ExitCode}}", name, capture=True).stdout.strip()
    print(f"   exited with status {code} after {time.monotonic() - t0:.1f} s")
    if code != "0":
        raise RuntimeError(f"unclean stop: exit status {code}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-only", action="store_true", help="stop after building the image")
    ap.add_argument("--clean", action="store_true", help=f"delete {STATE} (images, layers) and exit")
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--grace", type=float, default=10.0, help="server.shutdown_grace_s of the image")
    args = ap.parse_args()
    if args.clean:
        if STATE.exists():
            ensure_tools()
            podman("system", "reset", "--force")
            shutil.rmtree(STATE)
        return 0

    name = f"switchboard-image-test-{os.getpid()}"
    failed = False
    try:
        with phase("tools"):
            ensure_tools()
        with phase("base image"):
            ensure_base()
        with phase("build"):
            build()
        if args.build_only:
            return 0
        port = free_port()
        with phase("start (until /health)"):
            # NOTE: published on loopback only; slirp4netns leaves no host network state.
            podman("run", "-d", "--name", name, "--network=slirp4netns", "-p", f"127.0.0.1:{port}:30000",
                   IMAGE, capture=True)
            wait_healthy(name, f"http://127.0.0.1:{port}/health", args.start_timeout)
        with phase("chat completion"):
            print(f"   reply: {chat(f'http://127.0.0.1:{port}/v1')!r}")
        with phase("stop (SIGTERM)"):
            stop(name, args.grace)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        failed = True
        print(f"image-test: FAILED: {exc}", file=sys.stderr)
        if podman("container", "exists", name, check=False).returncode == 0:
            podman("logs", "--tail", "60", name, check=False)
    finally:
        if shutil.which("podman") and os.environ.get("CONTAINERS_CONF"):
            podman("rm", "-f", "-t", "0", name, check=False, capture=True)
        print("image-test times: " + ", ".join(f"{n} {t:.1f} s" for n, t in _times))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
