"""mtkit: a machine translation toolkit, from the command line (``mtkit --help``) or from Python:

    import mtkit
    model = mtkit.load("runs/demo", beam_size=5)
    model.translate(["A man is riding a bike.", ""])   # ["Ein Mann fährt Fahrrad.", ""]
    model.translate("A man is riding a bike.", prefix="Ein Mann", constraints=["Rad"])

``import mtkit`` imports no torch: ``load`` does, when called (see ``mtkit.inference.api``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from mtkit.errors import MtkitError
from mtkit.inference.results import Hypothesis, Translation
from mtkit.inference.segments import Segment
from mtkit.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

    from mtkit.inference.api import TranslationModel

__all__ = ["Hypothesis", "MtkitError", "Segment", "Translation", "load", "__version__"]


def load(path: Union[str, "Path"], **options) -> "TranslationModel":
    """A model to translate with, from a run dir, a checkpoint or a dir written by ``mtkit export``.

    ``options``: those of ``mtkit translate`` under the names docs/cli.md gives them (beam_size, length_penalty,
    max_len_a, max_len_b, batch_size, batch_tokens, step_rows, nbest, device, dtype, threads, stopping, search,
    shortlist, engine, checkpoints=[...] to ensemble), ``algorithm``: a name in ``mtkit.decoding.algorithms.REGISTRY``,
    and that algorithm's own options (``mtkit.decoding.algorithms.params()``: top_p, mbr_candidates...); see
    ``mtkit.inference.api.load``. Bad ones raise ``MtkitError``.
    """
    from mtkit.inference.api import load as load_model

    return load_model(path, **options)
