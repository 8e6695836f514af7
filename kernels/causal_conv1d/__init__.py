"""Causal depthwise conv1d (the short convolutions of LFM2 and Mamba-style layers) in torch: SGLang's CPU path.

SGLang 0.5.23 runs these convolutions through its compiled CUDA kernels
(``sglang.kernels.ops.mamba``: ``causal_conv1d_fwd`` for prefill,
``causal_conv1d_update`` for decode) or, on any other device, through Triton
kernels that a CPU can run only under Triton's interpreter, at a few
milliseconds per token and layer. ``reference`` holds the same two kernels in
torch, with the compiled kernels' signatures and in-place contract, and is what
a Switchboard CPU server runs for a hybrid model
(``server/sglang/launch/conv_kernels.py``). Checked against SGLang's Triton
kernels under the interpreter (``tests/seams/test_conv_kernels.py``): the same
outputs and states, bit for bit in float32 (SiLU's outputs within a few ulp).
"""
