"""Serving: ``mtkit serve``, HTTP over the inference API (mtkit's own routes and LibreTranslate's)."""
