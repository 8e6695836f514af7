"""The SGLang processes' environment: they import the very tree the supervisor runs from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compose.config import compose
from server.resolve import resolve
from server.sglang.launch.env import CODE_ROOT, SITE_DIR, child_env


def test_children_import_server_from_the_supervisors_tree_even_from_another_directory(tmp_path):
    """NOTE: sitecustomize imports ``server`` at interpreter start, before ``-m`` puts the
    working directory on the path: without CODE_ROOT first, a worktree's server ran the
    main checkout's launcher (the installed package's path)."""
    plan = resolve(compose(["server.device=cpu"]))
    env = child_env(plan, tmp_path / "plan.json", base={"PYTHONPATH": "/elsewhere", "PATH": "/usr/bin:/bin"})
    assert env["PYTHONPATH"].split(":") == [str(SITE_DIR), str(CODE_ROOT), "/elsewhere"]
    out = subprocess.run([sys.executable, "-c", "import sys, server; print(server.__file__); "
                          "print('server.sglang.launch.stub' in sys.modules)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert Path(out[0]).resolve().parent == CODE_ROOT / "server" and out[1] == "True"
