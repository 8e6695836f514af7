"""GPU kernels (FlashInfer/Triton), each paired with a torch reference that runs on CPU.

Empty until a technique needs a kernel of its own; SGLang's kernels serve the
foundation.
"""
