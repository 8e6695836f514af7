"""SGLang's hierarchical cache (HiCache: host tier, storage) on the CPU path."""
