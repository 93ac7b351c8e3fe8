"""Prepare: parallel text in, a data dir out (sources, cleaning and encoding, the summary), and the batches training reads from it."""
