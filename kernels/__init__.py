"""GPU kernels (FlashInfer/Triton), each paired with a torch reference that runs on CPU.

``scute/``: the generalized adapter computation (LoRA, DoRA, VeRA, OFT, IA3 in
one batch): slots, torch reference, PEFT reader, stacked pool, Triton kernel.
``segment_mask/``: attention over a packed sequence (one shared context, then
questions that see it and themselves only; Flide), or any prefix + inner mask
(the speculative tree verify): torch reference (the CPU path) and FlashInfer's
custom-mask prefill (not yet run on a GPU).
SGLang's own kernels serve everything else.
"""
