"""A rule-based sentence splitter written as a MiniSBD model: the ONNX file that Argos Translate's default sentence
splitter (MiniSBD) reads from a package's ``minisbd/`` folder instead of downloading its trained model.

MiniSBD runs a character tagger: its ONNX graph reads a paragraph's characters as ids (``units``, int64
``[batch, chars]``, ids from the vocabulary stored in the file's metadata) and one row of features per character
(``features``, float ``[batch, chars, 2]`` here: the character is a space; it is upper case), and answers five
scores per character (``[batch, chars, 5]``: 0 inside a token, 1 end of a token, 2 end of a sentence, 3 and 4 the
same for multi-word tokens). MiniSBD takes the best class of each character and cuts the paragraph after every
class 2 (and always after its last character).

The graph written here encodes one rule instead of trained weights: a sentence ends at ``.``, ``!``, ``?`` or ``…``
followed by a space and then an upper-case letter, an opening quote or bracket, or a digit; and at ``。``, ``！``
or ``？`` (no space follows those). A character before a space ends a token. The rule does not know abbreviations
("Mr. Smith" is cut after "Mr.") nor languages without letter case, which MiniSBD's trained models handle; it
needs no download and no library beyond what MiniSBD already uses (onnxruntime).

The file is encoded here field by field (ONNX is a protobuf message: ``protobuf_wire``), so writing it needs neither
the ``onnx`` nor the ``protobuf`` package: IR version 8, operator set 13 of the default domain.
"""

from __future__ import annotations

import json
import struct

from mtkit.interop.protobuf_wire import bytes_field as _bytes
from mtkit.interop.protobuf_wire import int_field as _int
from mtkit.interop.protobuf_wire import int_fields as _ints

# ------------------------------------------------------------------------------------------- the rule
SENTENCE_END = (".", "!", "?", "\u2026")  # need a space and a sentence start after them
SENTENCE_END_NO_SPACE = ("\u3002", "\uff01", "\uff1f")  # 。！？: end a sentence wherever they are
SENTENCE_START = ('"', "'", "(", "[", "\u00bf", "\u00a1", "\u201c", "\u2018", "\u00ab", "\u201e", *"0123456789")
FEATURES = ["space_before", "capitalized"]  # MiniSBD's feature functions, in this order (space, upper case)
VOCAB = ["<PAD>", "<UNK>", " ", *SENTENCE_END, *SENTENCE_END_NO_SPACE, *SENTENCE_START]


def metadata(lang: str) -> dict[str, str]:
    """The ONNX metadata MiniSBD reads: its config, the character vocabulary and no lexicon.

    Args:
        lang: the language code stored in the file (MiniSBD only reports it).

    Returns:
        {"lang_code", "config", "vocab", "lexicon"}, each a string (JSON where MiniSBD parses JSON).
    """
    config = {
        "skip_newline": False,
        "max_seqlen": 1000,
        "no_ssplit": False,
        "batch_size": 32,
        "feat_funcs": FEATURES,
        "use_dictionary": False,
        "num_dict_feat": 0,
    }
    vocab = {
        "lang": lang,
        "idx": 0,
        "cutoff": 0,
        "lower": False,
        "_unit2id": {unit: i for i, unit in enumerate(VOCAB)},
        "_id2unit": VOCAB,
    }
    return {
        "lang_code": lang,
        "config": json.dumps(config),
        "vocab": json.dumps(vocab, ensure_ascii=False),
        "lexicon": "null",
    }


# ------------------------------------------------------------------------------------------ ONNX messages
FLOAT, INT64 = 1, 7  # TensorProto.DataType
ATTR_INT, ATTR_INTS = 2, 7  # AttributeProto.AttributeType


def _tensor(name: str, values: list, dtype: int) -> bytes:
    """A 1-D TensorProto (dims 1, data_type 2, name 8, raw_data 9, little-endian)."""
    raw = struct.pack(f"<{len(values)}{'f' if dtype == FLOAT else 'q'}", *values)
    return _ints(1, [len(values)]) + _int(2, dtype) + _bytes(8, name) + _bytes(9, raw)


def _attribute(name: str, value) -> bytes:
    """An AttributeProto: name 1, i 3, ints 8, type 20."""
    if isinstance(value, (list, tuple)):
        return _bytes(1, name) + _ints(8, value) + _int(20, ATTR_INTS)
    return _bytes(1, name) + _int(3, value) + _int(20, ATTR_INT)


def _node(op: str, inputs: list[str], output: str, **attributes) -> bytes:
    """A NodeProto: input 1, output 2, name 3, op_type 4, attribute 5."""
    body = b"".join(_bytes(1, i) for i in inputs) + _bytes(2, output) + _bytes(3, output) + _bytes(4, op)
    return body + b"".join(_bytes(5, _attribute(k, v)) for k, v in attributes.items())


def _value_info(name: str, dtype: int, dims: list) -> bytes:
    """A ValueInfoProto (name 1, type 2) of a tensor whose dims are sizes (int) or names (str)."""
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, dtype) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


# ------------------------------------------------------------------------------------------ the graph
def _graph() -> bytes:
    """The rule as a GraphProto (node 1, name 2, initializer 5, input 11, output 12)."""
    ids = {unit: i for i, unit in enumerate(VOCAB)}
    big = 2**62
    constants = [
        _tensor("end_ids", [ids[u] for u in SENTENCE_END], INT64),
        _tensor("end_cjk_ids", [ids[u] for u in SENTENCE_END_NO_SPACE], INT64),
        _tensor("start_ids", [ids[u] for u in SENTENCE_START], INT64),
        _tensor("axis_last", [-1], INT64),
        _tensor("axis_1", [1], INT64),
        _tensor("pad_2_after", [0, 0, 0, 2], INT64),  # [chars + 2]: room to look two characters ahead
        _tensor("one", [1], INT64),
        _tensor("two", [2], INT64),
        _tensor("minus_one", [-1], INT64),
        _tensor("end", [big], INT64),
        _tensor("zero_index", [0], INT64),
        _tensor("one_index", [1], INT64),
        _tensor("one_f", [1.0], FLOAT),
    ]
    nodes = [
        # which of each character's units is in a set: [b, c, 1] == [k] -> [b, c, k] -> max over k
        _node("Unsqueeze", ["units", "axis_last"], "units_col"),
        _node("Equal", ["units_col", "end_ids"], "is_end_k"),
        _node("Cast", ["is_end_k"], "is_end_kf", to=FLOAT),
        _node("ReduceMax", ["is_end_kf"], "is_end", axes=[2], keepdims=0),
        _node("Equal", ["units_col", "end_cjk_ids"], "is_cjk_k"),
        _node("Cast", ["is_cjk_k"], "is_cjk_kf", to=FLOAT),
        _node("ReduceMax", ["is_cjk_kf"], "is_cjk", axes=[2], keepdims=0),
        _node("Equal", ["units_col", "start_ids"], "is_start_k"),
        _node("Cast", ["is_start_k"], "is_start_kf", to=FLOAT),
        _node("ReduceMax", ["is_start_kf"], "is_start_sym", axes=[2], keepdims=0),
        # features: [b, c, 2] -> space, upper case
        _node("Gather", ["features", "zero_index"], "space_col", axis=2),
        _node("Gather", ["features", "one_index"], "upper_col", axis=2),
        _node("ReduceMax", ["space_col"], "space", axes=[2], keepdims=0),
        _node("ReduceMax", ["upper_col"], "upper", axes=[2], keepdims=0),
        _node("Max", ["upper", "is_start_sym"], "starts"),  # a sentence may start with this character
        # look ahead: pad two zeros after the characters, then slice one or two further on
        _node("Pad", ["space", "pad_2_after"], "space_padded"),
        _node("Slice", ["space_padded", "one", "minus_one", "axis_1"], "space_next"),
        _node("Pad", ["starts", "pad_2_after"], "starts_padded"),
        _node("Slice", ["starts_padded", "two", "end", "axis_1"], "starts_after_next"),
        # sentence end = end mark, space, sentence start; or a full-width end mark
        _node("Mul", ["is_end", "space_next"], "end_space"),
        _node("Mul", ["end_space", "starts_after_next"], "end_rule"),
        _node("Max", ["end_rule", "is_cjk"], "sentence"),
        _node("Sub", ["one_f", "sentence"], "inside"),
        _node("Mul", ["inside", "space_next"], "token"),  # end of a token: a space follows
        _node("Sub", ["inside", "token"], "plain"),
        _node("Sub", ["sentence", "sentence"], "zeros"),
        _node("Unsqueeze", ["plain", "axis_last"], "s0"),
        _node("Unsqueeze", ["token", "axis_last"], "s1"),
        _node("Unsqueeze", ["sentence", "axis_last"], "s2"),
        _node("Unsqueeze", ["zeros", "axis_last"], "s3"),
        _node("Concat", ["s0", "s1", "s2", "s3", "s3"], "scores", axis=2),
    ]
    inputs = [_value_info("units", INT64, ["batch", "chars"]), _value_info("features", FLOAT, ["batch", "chars", 2])]
    output = _value_info("scores", FLOAT, ["batch", "chars", 5])
    return (
        b"".join(_bytes(1, n) for n in nodes)
        + _bytes(2, "sentence_rules")
        + b"".join(_bytes(5, c) for c in constants)
        + b"".join(_bytes(11, i) for i in inputs)
        + _bytes(12, output)
    )


def minisbd_model(lang: str) -> bytes:
    """The splitter as the bytes of an ONNX file that MiniSBD loads (a ModelProto).

    Args:
        lang: the language code stored in its metadata.

    Returns:
        The file's bytes: IR version 8, opset 13, the graph of the module docstring and ``metadata(lang)``.
    """
    opset = _bytes(1, "") + _int(2, 13)
    props = b"".join(_bytes(14, _bytes(1, k) + _bytes(2, v)) for k, v in metadata(lang).items())
    return _int(1, 8) + _bytes(2, "mtkit") + _bytes(7, _graph()) + _bytes(8, opset) + props
