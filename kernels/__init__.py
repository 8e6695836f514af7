"""GPU kernels (FlashInfer/Triton), each paired with a torch reference that runs on CPU.

``scute/``: the generalized adapter computation (LoRA, DoRA, VeRA, OFT, IA3 in
one batch): slots, torch reference, PEFT reader, stacked pool, Triton kernel.
SGLang's own kernels serve everything else.
"""
