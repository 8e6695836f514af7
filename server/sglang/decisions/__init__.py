"""The decisions kind on the server (``+decisions``): ``/v1/decisions`` packed (Flide)."""
