"""LEAP measurements: a prompt set with model-generated lengths and the live learning curve."""
