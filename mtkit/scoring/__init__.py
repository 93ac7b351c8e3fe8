"""Scoring: sacreBLEU's BLEU, chrF and TER, and paired significance tests (no torch)."""
