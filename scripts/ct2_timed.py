#!/usr/bin/env python
"""Run a Python program and record how much of its time went into CTranslate2's ``translate_batch``.

    python scripts/ct2_timed.py REPORT.json -m mtkit translate EXPORT -b 1 < source.txt
    python scripts/ct2_timed.py REPORT.json scripts/ct2_direct.py EXPORT --beam-size 1 < source.txt

The program runs in this process (a module with -m, else a script path) with ``ctranslate2.Translator`` replaced
by a subclass that times each ``translate_batch`` call. At exit REPORT.json holds ``{"seconds": from the start of
this script to its exit, "ctranslate2": seconds inside translate_batch, "calls": their number}``; the rest is
start-up, Python and input/output. `bench_ct2_engine.py --inside` splits each process's time this way.
"""

from __future__ import annotations

import atexit
import json
import runpy
import sys
import time

START = time.perf_counter()


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    report, program = sys.argv[1], sys.argv[2:]
    spent = {"ctranslate2": 0.0, "calls": 0}

    import ctranslate2

    class Timed(ctranslate2.Translator):
        def translate_batch(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return super().translate_batch(*args, **kwargs)
            finally:
                spent["ctranslate2"] += time.perf_counter() - start
                spent["calls"] += 1

    ctranslate2.Translator = Timed

    def write() -> None:
        with open(report, "w", encoding="utf-8") as f:
            json.dump({"seconds": time.perf_counter() - START, **spent}, f)

    atexit.register(write)
    if program[0] == "-m":
        sys.argv = [program[1], *program[2:]]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = program
        runpy.run_path(program[0], run_name="__main__")


if __name__ == "__main__":
    main()
