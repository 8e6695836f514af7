"""Running SGLang's Triton kernels on CPU in a fresh interpreter, for seam tests.

``TRITON_INTERPRET=1`` is read when a kernel module is decorated, that is when
SGLang imports it, so it must be set before any SGLang import: the kernels run
in a child process, never in the test process (where other tests import SGLang
without it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from tests.conftest import REPO


def run_interpreted(script: str, inputs: Any, folder: Path, timeout: float) -> Any:
    """``python -c script in.pt out.pt`` under the Triton interpreter (one thread): ``inputs``
    saved to ``in.pt``, what the script saved to ``out.pt`` returned."""
    torch.save(inputs, folder / "in.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(folder / "in.pt"), str(folder / "out.pt")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(folder / "out.pt")
