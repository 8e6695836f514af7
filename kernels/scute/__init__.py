"""Scute: one generalized adapter computation that LoRA, DoRA, VeRA, OFT and IA3 fill.

For a linear layer ``y = x W^T + b`` (``W``: out x in), an adapter fills some of
these slots; an unused slot multiplies by one or adds zero (it is ``None``)::

    y = s * ((x T) W^T) + b + t  +  e * (((x A^T) * d) B^T)

    T  input transform (in x in), block-diagonal: ``blocks`` (n, k, k), x split
       into n blocks of k features, each multiplied by its block (x @ block)
    s  per-output-feature scale (out)        t  per-output-feature shift (out)
    A  low-rank down projection (r x in)     B  low-rank up projection (out x r)
    d  per-rank scale of the middle (r)      e  per-output scale of the low-rank term (out)

How each PEFT method fills them (``peft.py`` converts a saved adapter exactly):

==========  =====================================================================
LoRA        A, B; e = lora_alpha / r (or / sqrt(r) with rsLoRA)
DoRA        A, B; s = m / ||W + scaling B A||_row (PEFT's norm, precomputed at
            load from the base weight); e = s * scaling
VeRA        A, B = the shared random matrices, sliced; d = lambda_d; e = lambda_b
OFT         T = block-diagonal Cayley (or Cayley-Neumann) rotation, precomputed
IA3         feed-forward layers: T = diag(l) (blocks of size 1); others:
            s = l, t = (l - 1) * b (PEFT scales the biased output)
==========  =====================================================================

``slots.AdapterSlots`` holds one layer's slots; ``reference`` computes the layer
in torch (the CPU path and the kernels' oracle), for one adapter or for a batch
whose rows use different adapters.
"""
