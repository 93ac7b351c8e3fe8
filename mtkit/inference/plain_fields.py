"""The fields of the decoding section and of the output flags as plain data: written by
`python -m mtkit.config.plain` from the schema (mtkit/config/schema.py, mtkit/flags.py); do not edit.
"""

DECODING = {
    "algorithm": {"default": "beam", "type": "str"},
    "beam_size": {"default": 5, "type": "int", "ge": 1},
    "length_penalty": {"default": 1.0, "type": "float", "ge": 0, "le": 10},
    "max_len_a": {"default": 1.5, "type": "float", "ge": 0},
    "max_len_b": {"default": 10, "type": "int", "ge": 0},
    "batch_size": {"default": 200, "type": "int", "ge": 1},
    "batch_tokens": {"default": None, "type": "int", "optional": True, "ge": 1},
    "step_rows": {"default": 1000, "type": "int", "ge": 1},
    "chunk_size": {"default": 2000, "type": "int", "ge": 1},
    "nbest": {"default": 1, "type": "int", "ge": 1},
    "stopping": {"default": "beam_full", "type": "choice", "choices": ("first", "beam_full", "exact")},
    "search": {"default": "mtkit", "type": "choice", "choices": ("mtkit", "ctranslate2")},
    "device": {"default": "auto", "type": "choice", "choices": ("auto", "cpu", "cuda")},
    "dtype": {"default": "auto", "type": "choice", "choices": ("auto", "float32", "bfloat16", "float16", "int8")},
    "threads": {"default": None, "type": "int", "optional": True, "ge": 1},
    "shortlist": {"default": 0, "type": "int", "ge": 0, "le": 100},
    "shortlist_frequent": {"default": 100, "type": "int", "ge": 0, "le": 1000},
}
OUTPUT = {
    "format": {"default": "text", "type": "choice", "choices": ("text", "jsonl")},
    "input_format": {"default": "text", "type": "choice", "choices": ("text", "jsonl", "html")},
    "engine": {"default": "torch", "type": "choice", "choices": ("torch", "ctranslate2")},
    "export_format": {"default": "ctranslate2", "type": "choice", "choices": ("ctranslate2", "hf", "argos", "web")},
}
