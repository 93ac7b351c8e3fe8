"""The experiment config's schema: one YAML file, four sections, validated on load.

Every default is written once, here (the data section in ``mtkit.config.data``); ``mtkit.config.reading`` reads,
overrides and writes the file.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, create_model, model_validator

from mtkit.config.data import DataConfig
from mtkit.config.section import Section
from mtkit.decoding import algorithms
from mtkit.languages import language_tag  # noqa: F401  (a config name too: mtkit.config.language_tag)


# ---------------------------------------------------------------------------------------------- model
class TransformerConfig(Section):
    arch: Literal["transformer"] = "transformer"
    d_model: int = Field(512, gt=0)
    heads: int = Field(8, gt=0)
    encoder_layers: int = Field(6, ge=1)
    decoder_layers: int = Field(6, ge=1)
    ffn_dim: int = Field(2048, gt=0)
    decoder_ffn_dim: Optional[int] = Field(None, gt=0, description="the decoder's feed-forward size (None: ffn_dim)")
    decoder_self: Literal["attention", "ssru"] = Field(
        "attention", description="the decoder's self-attention, or an SSRU (Kim et al. 2019) in its place"
    )
    activation: Literal["relu", "gelu", "swish"] = "relu"
    norm: Literal["post", "pre"] = "post"
    positions: Literal["sinusoidal", "learned", "relative", "rope", "alibi"] = "sinusoidal"
    max_relative_distance: int = Field(16, ge=1, description="k of Shaw et al. (positions: relative)")
    max_positions: int = Field(1024, ge=8)
    dropout: float = Field(0.1, ge=0, lt=1)
    attention_dropout: float = Field(0.0, ge=0, lt=1)
    activation_dropout: float = Field(0.0, ge=0, lt=1)
    tie_embeddings: bool = True
    # what Marian models (mtkit import-hf) need; the defaults are mtkit's own Transformer
    scale_embedding: bool = Field(True, description="multiply the token embeddings by sqrt(d_model)")
    sinusoidal_layout: Literal["interleaved", "halves", "fairseq"] = Field(
        "interleaved",
        description="sin and cos on alternate channels, or sin in the first half and cos in the second (fairseq: "
        "with fairseq's frequencies, as M2M-100 and NLLB-200)",
    )
    position_offset: int = Field(
        0, ge=0, description="sinusoidal positions: the table row of the first position (fairseq: padding id + 1)"
    )
    final_logits_bias: bool = Field(False, description="a fixed (untrained) bias added to the output logits")
    init_from: Optional[str] = Field(
        None, description="a run directory whose weights and vocabulary a new run starts from"
    )

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.positions == "rope" and (self.d_model // self.heads) % 2:
            raise ValueError("rope needs an even head dimension (d_model / heads)")
        if self.positions == "alibi":
            for key, scheme in SCHEME_ONLY_KEYS.items():
                if getattr(self, key) != TransformerConfig.model_fields[key].default:
                    raise ValueError(
                        f"model.{key} is a key of positions {scheme}, which positions alibi does not use "
                        f"(its biases grow with distance, unclipped): remove model.{key}"
                    )
        return self


# model keys that only one position scheme reads -> that scheme
SCHEME_ONLY_KEYS = {"max_relative_distance": "relative"}


class _RNNConfig(Section):
    """The keys Bahdanau and Luong share."""

    embed_dim: int = Field(256, gt=0)
    hidden_size: int = Field(512, gt=0)
    dropout: float = Field(0.2, ge=0, lt=1)
    max_positions: int = Field(1024, ge=8)
    tie_embeddings: bool = True
    init_from: Optional[str] = Field(
        None, description="a run directory whose weights and vocabulary a new run starts from"
    )
    param_init: float = Field(
        0.1, ge=0, description="parameters start uniform in [-param_init, param_init]; 0 keeps PyTorch's defaults"
    )


class BahdanauConfig(_RNNConfig):
    arch: Literal["bahdanau"]
    encoder_layers: int = Field(1, ge=1)


class LuongConfig(_RNNConfig):
    arch: Literal["luong"]
    layers: int = Field(2, ge=1)
    encoder: Literal["unidirectional", "bidirectional"] = Field(
        "unidirectional", description="bidirectional: hidden_size / 2 per direction, concatenated (OpenNMT-py's brnn)"
    )
    score: Literal["dot", "general", "concat", "location"] = "general"
    attention: Literal["global", "local_p"] = "global"
    window: int = Field(10, ge=1, description="D of local-p attention (window 2D+1)")
    input_feeding: bool = True

    @model_validator(mode="after")
    def _directions_split_hidden(self):
        if self.encoder == "bidirectional" and self.hidden_size % 2:
            raise ValueError(f"a bidirectional encoder needs an even hidden_size (got {self.hidden_size})")
        return self


ModelConfig = Annotated[Union[TransformerConfig, BahdanauConfig, LuongConfig], Field(discriminator="arch")]


# ------------------------------------------------------------------------------------------- training
FP16_NEEDS_CUDA = "training.precision fp16 needs a CUDA GPU; use bf16 or fp32 on CPU"


# the Transformer's attention projections: self-attention's fused qkv, cross-attention's q and fused kv, each out
LORA_DEFAULT_MODULES = ("qkv", "q", "kv", "out")


class LoraSection(Section):
    """training.lora: low-rank adapters (LoRA, Hu et al. 2021, through PEFT) on some linear layers of a base model
    (``model.init_from``); only the adapters train (docs/pretrained.md)."""

    rank: int = Field(8, ge=1, le=4096, description="r: the adapters' inner dimension")
    alpha: float = Field(16.0, gt=0, description="the adapters' output is scaled by alpha / rank")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    modules: list[str] = Field(
        default_factory=lambda: list(LORA_DEFAULT_MODULES),
        min_length=1,
        description="the linear layers to adapt: a name matches a layer whose dotted path ends with it (qkv, "
        "self_attn.qkv, decoder.0.ffn.fc1); * and ? match as in file names (decoder.*.ffn.fc1)",
    )


class TrainingConfig(Section):
    # the optimisation defaults (adam, lr 5e-4, betas, eps, inverse_sqrt with 4,000 warm-up updates, label smoothing
    # 0.1, 4,096-token batches) are fairseq's transformer recipe, not measured here: what sections 1, 3 and 18 of
    # docs/benchmarks.md measured are the configs' own values (configs/multi30k-transformer*.yaml); precision fp32
    # and compile off: section 5 (bf16 autocast at half of fp32's rate on these CPUs; compile recompiles, 0.73x)
    run_dir: str
    seed: int = 1
    devices: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    threads: Optional[int] = Field(None, ge=1, description="torch intra-op threads (default: all cores)")
    compile: bool = False
    tf32: bool = Field(
        True, description="fp32 on a CUDA GPU: TensorFloat-32 matmuls (about 7x faster on an H100); false: exact fp32"
    )
    batch_tokens: int = Field(4096, gt=0, description="sentences x max(padded source, padded target length) per batch")
    update_freq: int = Field(1, ge=1, description="batches accumulated per optimizer update")
    max_updates: Optional[int] = Field(None, ge=1)
    max_epochs: Optional[int] = Field(None, ge=1)
    max_minutes: Optional[float] = Field(None, gt=0, description="wall-clock budget of this run")
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = Field(5e-4, gt=0, description="peak learning rate (noam: the factor)")
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = Field(1e-9, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    schedule: Literal["inverse_sqrt", "noam", "cosine", "constant"] = "inverse_sqrt"
    warmup_updates: int = Field(4000, ge=0)
    min_lr: float = Field(0.0, ge=0, description="floor of the cosine schedule")
    decay_over: Literal["updates", "minutes", "both"] = Field(
        "updates", description="cosine: decay over max_updates, max_minutes, or whichever runs out first (both)"
    )
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    clip_norm: float = Field(0.0, ge=0, description="max gradient norm; 0 disables clipping")
    log_every: int = Field(50, ge=1)
    validate_every: int = Field(1000, ge=1)
    save_every: Optional[int] = Field(None, ge=1, description="checkpoint interval (default: validate_every)")
    valid_bleu: bool = True
    valid_beam_size: int = Field(1, ge=1)
    valid_max_sentences: Optional[int] = Field(None, ge=1, description="decode only the first N valid sentences")
    best_metric: Literal["bleu", "chrf", "loss"] = "bleu"
    patience: Optional[int] = Field(None, ge=1, description="stop after this many validations without improvement")
    keep_last: int = Field(3, ge=1)
    keep_best: int = Field(1, ge=0)
    average_last: int = Field(0, ge=0, description="write average.safetensors of the last N checkpoints at the end")
    calibrate: bool = Field(
        False, description="at the end, fit the translations' confidence on the valid split (mtkit calibrate)"
    )
    curves: bool = Field(
        True, description="draw RUN/curves.png when training stops (matplotlib; mtkit plot RUN draws it at any time)"
    )
    tensorboard: bool = Field(
        False,
        description="also write the metrics.jsonl records and a sample translation per validation as TensorBoard "
        "event files in RUN/tensorboard (pip install 'mtkit[tensorboard]')",
    )
    lora: Optional[LoraSection] = Field(
        None, description="train low-rank adapters on model.init_from's weights, which stay frozen (mtkit[lora])"
    )
    freeze_embeddings: bool = Field(
        False, description="the token embeddings and the output projection (tied or not) are not trained"
    )
    gradient_checkpointing: bool = Field(
        False, description="keep only each layer's input for the backward pass and run the layer again there"
    )

    @model_validator(mode="after")
    def _consistent(self):
        if self.decay_over != "updates" and self.schedule != "cosine":
            raise ValueError(f"training.decay_over {self.decay_over} applies to schedule cosine only")
        needs = {"updates": ("max_updates",), "minutes": ("max_minutes",), "both": ("max_updates", "max_minutes")}
        missing = [f"training.{key}" for key in needs[self.decay_over] if not getattr(self, key)]
        if self.schedule == "cosine" and missing:
            raise ValueError(
                f"training.schedule cosine with decay_over {self.decay_over} decays to min_lr at "
                f"{' and '.join(needs[self.decay_over])}: set {' and '.join(missing)} (or use schedule inverse_sqrt)"
            )
        if self.precision == "fp16" and self.devices == "cpu":  # devices auto: checked once the device is known
            raise ValueError(FP16_NEEDS_CUDA)
        if self.lora is not None and self.average_last > 1:
            raise ValueError(
                "training.average_last averages whole weights, and a training.lora run saves only its adapters: "
                "set average_last 0 (or average the merged runs of mtkit merge-lora)"
            )
        return self


# ------------------------------------------------------------------------------------------- decoding
class _DecodingFields(Section):
    """The decoding section's own fields; ``DecodingConfig`` adds each registered algorithm's options."""

    algorithm: str = Field(
        "beam", description=f"{algorithms.names()}, or an entry registered in mtkit/decoding/algorithms.py later"
    )
    # the defaults' measurements (docs/benchmarks.md): beam 5 within 0.1 BLEU of beams 8 and 16 at 0.7x and 0.2x
    # their time (section 24); length penalty 1.0 against 2.0 and 3.0 chosen on val, which did not carry to test
    # (section 3); batch_size 200 and step_rows 1,000 (sections 2, 20, 21: every decoding figure ran with them;
    # larger encoder batches pad more and gained nothing steady); chunk_size 2,000 bounds translate's memory
    # (section 7); stopping beam_full, shortlist 0 and dtype auto (section 2, "The default, chosen on val")
    beam_size: int = Field(5, ge=1)
    length_penalty: float = Field(1.0, ge=0, le=10, description="GNMT alpha; 0 = raw log-probability")
    max_len_a: float = Field(1.5, ge=0)
    max_len_b: int = Field(10, ge=0)
    batch_size: int = Field(200, ge=1, description="sentences per batch")
    batch_tokens: Optional[int] = Field(
        None,
        ge=1,
        description="also at most this many source tokens per batch "
        "(sentences x the longest, EOS included); a longer sentence goes alone",
    )
    step_rows: int = Field(
        1000,
        ge=1,
        description="the torch engine's hypotheses stepped together: consecutive length-sorted batches are decoded "
        "as one while their sentences x beam_size (nbest when sampling) stay within it, each still encoded alone; "
        "batch_size and batch_tokens bound the encoder's batches, this bounds the decoder's memory",
    )
    chunk_size: int = Field(2000, ge=1, description="lines read from stdin and length-sorted at a time")
    nbest: int = Field(1, ge=1)
    stopping: Literal["first", "beam_full", "exact"] = Field(
        "beam_full",
        description="when a sentence's beam search ends: first = as soon as the best candidate "
        "is finished (OpenNMT-py); beam_full = once beam_size hypotheses finished (fairseq); exact = only when "
        "no live beam can beat the n-best (slower with a length penalty)",
    )
    search: Literal["mtkit", "ctranslate2"] = Field(
        "mtkit",
        description="the CTranslate2 engine's beam search: mtkit = ranked as the torch engine ranks (GNMT length "
        "penalty on the model's log-probs, each sentence's own output limit); ctranslate2 = CTranslate2's own "
        "(score / length ** length_penalty, one call per batch, CTranslate2's scores)",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16", "int8"] = Field(
        "auto",
        description="int8 (CPU): linear layers with int8 weights, activations quantized per row; auto = int8 where "
        "PyTorch's x86 int8 kernels run the model's products at least 1.2x faster than float32 on this CPU (timed "
        "once per machine: mtkit/inference/kernels.py), else float32",
    )
    threads: Optional[int] = Field(None, ge=1)
    shortlist: int = Field(
        0,
        ge=0,
        le=100,
        description="lexical shortlist (Transformer): score each sentence over "
        "EOS, the shortlist_frequent most frequent target subwords and this many translations of "
        "each source subword (mtkit/decoding/shortlist.py); 0 = the whole vocabulary",
    )
    shortlist_frequent: int = Field(100, ge=0, le=1000, description="most frequent target subwords in every shortlist")

    @model_validator(mode="after")
    def _known_algorithm_and_its_options(self):
        chosen = algorithms.REGISTRY.get(self.algorithm)
        if chosen is None:
            raise ValueError(f"algorithm {self.algorithm!r} is unknown; use one of {', '.join(algorithms.REGISTRY)}")
        for name, (owner, param) in algorithms.params().items():
            if owner is not chosen and getattr(self, name, param.default) != param.default:
                raise ValueError(
                    f"{name} is an option of algorithm {owner.name}, not {chosen.name}: "
                    f"set algorithm: {owner.name} or drop {name}"
                )
        return self


def _option_field(owner: algorithms.Algorithm, param: algorithms.Param) -> tuple:
    """A registered algorithm's option as a field of the decoding section."""
    kind = Literal[param.choices] if param.choices else param.kind
    bounds = {key: getattr(param, key) for key in ("ge", "gt", "le", "lt") if getattr(param, key) is not None}
    return kind, Field(param.default, description=f"{owner.name}: {param.help}", **bounds)


# the registry's options (those registered when this module is first imported) are the section's fields too
DecodingConfig = create_model(
    "DecodingConfig",
    __base__=_DecodingFields,
    __module__=__name__,
    __doc__="The decoding section: how ``translate`` and the server decode, and each algorithm's own options.",
    **{param.name: _option_field(owner, param) for name, (owner, param) in algorithms.params().items()},
)


class Config(Section):
    data: DataConfig
    model: ModelConfig = Field(default_factory=TransformerConfig)
    training: Optional[TrainingConfig] = None
    decoding: DecodingConfig = Field(default_factory=DecodingConfig)

    @model_validator(mode="after")
    def _training_fits_the_model(self):
        t = self.training
        if t is None:
            return self
        if t.lora is not None and not self.model.init_from:
            raise ValueError(
                "training.lora adapts the weights of a trained model: set model.init_from to a run (or an imported "
                "model) to start from"
            )
        if t.gradient_checkpointing and self.model.arch != "transformer":
            raise ValueError(
                f"training.gradient_checkpointing runs the Transformer's layers again; model.arch {self.model.arch} "
                "has none: set it false"
            )
        return self
