"""Inference: ``mtkit.load`` and the model object it returns, its decoding options, the torch and CTranslate2 engines, streaming translation."""
