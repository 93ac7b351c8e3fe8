"""Decoding algorithms over the model interface: beam search, sampling, constraints and their guidance, the vocabulary shortlist."""
