"""``+speculative`` in SGLang: the NGRAM worker with a per-step draft length, its plugin
algorithm, and what the CPU path lacks (torch kernels, the tree-masked verify)."""
