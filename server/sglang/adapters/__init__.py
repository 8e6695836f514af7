"""SGLang's LoRA path: Scute's generalized slots and the slot eviction seam."""
