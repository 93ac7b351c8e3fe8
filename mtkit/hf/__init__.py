"""Hugging Face MarianMT (OPUS-MT) models: ``mtkit import-hf`` (importer.py) reads one into an mtkit run directory,
``mtkit export --format hf`` (exporter.py) writes an mtkit Transformer as one; marian.py holds the mapping both
directions share. Only safetensors, JSON and SentencePiece are read and written: transformers is not needed."""
