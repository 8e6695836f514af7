"""Live measurements against a real Switchboard/SGLang server (tests and scripts share these)."""
