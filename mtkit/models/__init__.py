"""build_model: one explicit function from the model config to a Seq2Seq module."""

from __future__ import annotations

from mtkit.models.base import BOS, EOS, PAD, UNK, Seq2Seq, State  # noqa: F401
from mtkit.models.rnn import Bahdanau, Luong
from mtkit.models.transformer import Transformer


def build_model(cfg, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool) -> Seq2Seq:
    """The model ``cfg.arch`` names, freshly initialised.

    Args:
        cfg: the config's ``model`` section.
        src_vocab_size: the source vocabulary size.
        tgt_vocab_size: the target vocabulary size.
        joint_vocab: source and target share one vocabulary; only then does ``tie_embeddings`` tie the source
            embedding too (the target embedding and the output layer it ties in any case).

    Returns:
        A ``Transformer``, ``Bahdanau`` or ``Luong``.

    Raises:
        ValueError: an unknown ``cfg.arch``; for the RNNs, tied embeddings over a joint vocabulary whose two
            sizes differ.
    """
    match cfg.arch:
        case "transformer":
            return Transformer(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)
        case "bahdanau":
            return Bahdanau(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)
        case "luong":
            return Luong(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)
        case _:
            raise ValueError(f"unknown model.arch {cfg.arch!r}")
