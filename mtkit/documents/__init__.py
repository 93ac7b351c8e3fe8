"""Whole documents: each format read and written by the library made for it, only its text translated."""
