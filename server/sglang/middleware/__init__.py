"""HTTP middleware on SGLang's app: Retry-After on overload answers, session ids."""
