"""A kind from outside Switchboard, live: the toy kind (``tests/toykind``), declared as an
installed distribution's entry point (``switchboard.kinds``) and its option's YAML on
Hydra's search path, is found by the CLI, carried by the plan, and decides inside SGLang's
own scheduler process (a subprocess of the launcher), with no file outside ``tests/``
naming it."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from bench.live.server import REPO

pytestmark = pytest.mark.server


def toy_distribution(root: Path) -> Path:
    """A site directory holding an installed distribution that declares the toy kind."""
    site = root / "site"
    info = site / "switchboard_toykind-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: switchboard-toykind\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[switchboard.kinds]\ntoy = tests.toykind:TOY\n")
    return site


def test_an_entry_point_kind_decides_inside_sglangs_scheduler(start_server, tmp_path, monkeypatch):
    conf = tmp_path / "conf" / "toy"
    conf.mkdir(parents=True)
    (conf / "hold.yaml").write_text("# Hold every second pass.\n_target_: tests.toykind.hold.HoldPolicy\n"
                                    "every: 2\nconservativeness: 0.5\n")
    path = [str(toy_distribution(tmp_path)), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    server = start_server(f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+toy=hold",
                          "sglang.max_running_requests=1")
    try:
        for i in range(3):
            body = {"model": "default", "messages": [{"role": "user", "content": f"Say {i}."}],
                    "max_tokens": 4, "temperature": 0}
            r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
        log = server.log_text()
    finally:
        server.stop()
    # The scheduler process installed the toy (the plugin's line) and its policy held passes there.
    assert "toy=tests.toykind.hold.HoldPolicy" in log
    assert "toy: held prefill pass 2 " in log
