"""Imported at start-up by every Python process SGLang spawns from Switchboard.

Switchboard puts this directory on ``PYTHONPATH`` of the SGLang processes it
launches on CPU; the ``sgl_kernel`` stub must be in place before any SGLang
import, which in a ``spawn`` child happens while unpickling its target.
"""

import os

if os.environ.get("SWITCHBOARD_STUB_SGL_KERNEL") == "1":
    from server.sglang.launch.stub import install_sgl_kernel_stub

    install_sgl_kernel_stub()
