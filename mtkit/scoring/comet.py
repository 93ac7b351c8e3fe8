"""COMET-22 and CometKiwi, natively: the checkpoints of unbabel-comet run on torch and transformers, at its scores.

Two model classes of unbabel-comet are read (docs/evaluation.md):

- ``regression_metric`` (COMET-22, ``Unbabel/wmt22-comet-da``): XLM-R encodes source, translation and reference
  apart; a layer mix of all its hidden states (embeddings included), average pooling over the tokens, then a
  feed-forward estimator on ``[mt, ref, mt*ref, |mt-ref|, mt*src, |mt-src|]``.
- ``unified_metric`` with input segments ``[mt, src]`` (CometKiwi, ``Unbabel/wmt22-cometkiwi-da``): one sequence
  ``<s> mt </s></s> src </s>``, cut to the encoder's length, and the estimator on the first token of the layer mix.

The layer mix weighs each hidden state by the softmax (or sparsemax) of its scalar, times ``gamma``; with
``layer_norm`` each hidden state is first normalised per sentence over all its tokens and units. ``sparsemax_patch``
is run as softmax, as unbabel-comet runs it. Each segment is cut to the encoder's length less two tokens, as
unbabel-comet cuts it.

A model is a directory in the Hugging Face hub's layout (``hparams.yaml``, ``checkpoints/model.ckpt``) or a hub
name found in the local hub cache; nothing is downloaded. The encoder named by ``pretrained_model`` is found the same
way (only its config and tokenizer files are read: the weights come from the checkpoint). The checkpoint is read
with ``torch.load(weights_only=True)``: one that would construct arbitrary objects is refused, and runs nothing.

Sentences are encoded in batches of similar length; a text met several times (a source shared by systems, a
candidate that is also a pseudo-reference) is encoded once.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

from mtkit.errors import MtkitError

CLASSES = ("regression_metric", "unified_metric")
DEFAULT_MODELS = {"comet": "Unbabel/wmt22-comet-da", "cometkiwi": "Unbabel/wmt22-cometkiwi-da"}
PREFIX = "encoder.model."


def resolve(name: str, what: str) -> Path:
    """A local directory, or the snapshot of hub repository ``name`` in the Hugging Face cache (never downloaded).

    Raises:
        MtkitError: neither a directory nor in the cache.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise MtkitError(f"{what} {name}: is a file; give the model's directory or a hub name")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        return Path(snapshot_download(str(name), local_files_only=True))
    except (HFValidationError, OSError, ValueError):
        raise MtkitError(
            f"{what} {name!r}: no such directory, and not in the Hugging Face cache ({constants.HF_HUB_CACHE}); "
            f"download it once (`hf download {name}`) or give its local directory"
        ) from None


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax (Martins & Astudillo 2016) of a vector: its Euclidean projection onto the simplex."""
    zs, _ = torch.sort(z, descending=True)
    cumulative = zs.cumsum(0)
    k = torch.arange(1, z.numel() + 1, dtype=z.dtype)
    support = int((1 + k * zs > cumulative).sum())
    tau = (cumulative[support - 1] - 1) / support
    return torch.clamp(z - tau, min=0)


def _no_init():
    """transformers' context that skips the random initialisation of a model about to be loaded, where it has one."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover - another transformers layout
        import contextlib

        return contextlib.nullcontext()
    return no_init_weights()


def _activation(name: str, key: str, where: Path) -> nn.Module:
    module = getattr(nn, str(name).title(), None)
    if module is None:
        raise MtkitError(f"{where}: {key} {name!r} is not a torch.nn activation; fix hparams.yaml")
    return module()


def _load_checkpoint(path: Path) -> dict:
    if not path.is_file():
        raise MtkitError(f"{path}: checkpoint not found; a COMET model directory holds checkpoints/model.ckpt")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).split("\n")[0][:160]
        raise MtkitError(
            f"{path}: refused: loading it would construct objects other than tensors and plain containers ({first}); "
            "use a checkpoint from a source you trust that holds only weights"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise MtkitError(f"{path}: not a readable torch checkpoint ({str(err).splitlines()[0][:160]})") from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise MtkitError(f"{path}: no state_dict in the checkpoint; is it a COMET checkpoint?")
    return state


def _read_hparams(path: Path) -> dict:
    import yaml

    if not path.is_file():
        raise MtkitError(f"{path}: hparams.yaml not found; a COMET model directory holds hparams.yaml")
    try:
        hparams = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise MtkitError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(hparams, dict):
        raise MtkitError(f"{path}: not a mapping of hyperparameters")
    kind = hparams.get("class_identifier")
    if kind not in CLASSES:
        raise MtkitError(f"{path}: class_identifier {kind!r} is not supported; mtkit runs {', '.join(CLASSES)}")
    return hparams


class Comet:
    """A COMET-22 (``regression_metric``) or CometKiwi (``unified_metric``) model ready to score.

    Use ``load``; ``score`` scores one system, ``score_systems`` several (their sources and references encoded
    once), ``embed`` and ``estimate`` are the two halves of a COMET-22 score (MBR encodes each text once).
    """

    def __init__(self, where: Path, hparams: dict, state: dict, encoder_dir: Path, device, dtype, batch_size: int):
        from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer

        self.where, self.hparams, self.device, self.dtype = where, hparams, torch.device(device), dtype
        self.batch_size = batch_size
        self.kind = hparams["class_identifier"]
        self.reference_free = self.kind == "unified_metric"
        if self.reference_free and list(hparams.get("input_segments", [])) != ["mt", "src"]:
            raise MtkitError(
                f"{where}: input_segments {hparams.get('input_segments')!r}: mtkit runs unified_metric models on "
                "[mt, src] (CometKiwi)"
            )
        self.pool = "cls" if self.reference_free else hparams.get("pool", "avg")
        if self.pool not in ("avg", "cls"):
            raise MtkitError(f"{where}: pool {self.pool!r} is not supported; mtkit pools with avg or cls")
        try:
            config = XLMRobertaConfig.from_pretrained(str(encoder_dir), local_files_only=True)
            self.tokenizer = XLMRobertaTokenizer.from_pretrained(str(encoder_dir), local_files_only=True)
        except (OSError, ValueError) as err:
            raise MtkitError(
                f"{encoder_dir}: the encoder's config or tokenizer cannot be read ({str(err).splitlines()[0][:200]})"
            ) from None
        self.max_tokens = config.max_position_embeddings - 2
        encoder_state = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
        encoder_state.pop("embeddings.position_ids", None)
        with _no_init():  # every weight comes from the checkpoint (a missing one is refused below)
            model = XLMRobertaModel(config, add_pooling_layer=False)
        try:
            missing, unexpected = model.load_state_dict(encoder_state, strict=False, assign=True)
        except RuntimeError as err:
            detail = " ".join(str(err).split())[:240]
            raise MtkitError(
                f"{where}: the encoder {hparams.get('pretrained_model')!r} does not fit the checkpoint "
                f"({detail}); give the encoder it was trained on"
            ) from None
        buffers = {name for name, _ in model.named_buffers()}
        missing = [k for k in missing if k not in buffers]
        if missing or unexpected:
            what = f"missing {missing[0]}" if missing else f"unexpected {PREFIX}{unexpected[0]}"
            raise MtkitError(
                f"{where}: the encoder {hparams.get('pretrained_model')!r} does not fit the checkpoint ({what}); "
                "give the encoder it was trained on"
            )
        if len(self.tokenizer) > config.vocab_size:
            raise MtkitError(
                f"{encoder_dir}: the tokenizer has {len(self.tokenizer)} pieces but the checkpoint's embeddings "
                f"{config.vocab_size}; give the encoder it was trained on"
            )
        self.encoder = model.to(device=self.device, dtype=dtype).eval()
        self.n_states = config.num_hidden_layers + 1
        self._layer_mix(state)
        # the layers above the highest state the mix weighs (sparsemax can weigh the top ones 0) change no score:
        # the encoder stops there
        top = max(i for i in range(self.n_states) if float(self.weights[i]) != 0.0)
        del self.encoder.encoder.layer[top:]
        self.estimator = self._estimator(state).to(self.device).eval()

    def _layer_mix(self, state: dict) -> None:
        layer = self.hparams.get("sent_layer" if self.reference_free else "layer", "mix")
        self.layer_norm = bool(self.hparams.get("layer_norm", False))
        if layer != "mix":
            if not isinstance(layer, int) or not 0 <= layer < self.n_states:
                raise MtkitError(f"{self.where}: layer {layer!r} is not 'mix' nor one of the encoder's states")
            self.layer_norm = False
            self.weights = torch.zeros(self.n_states)
            self.weights[layer] = 1.0
            self.gamma = 1.0
            return
        keys = [f"layerwise_attention.scalar_parameters.{i}" for i in range(self.n_states)]
        if any(k not in state for k in keys) or f"layerwise_attention.scalar_parameters.{self.n_states}" in state:
            raise MtkitError(
                f"{self.where}: the checkpoint's layer mix does not weigh the encoder's {self.n_states} hidden states; "
                "give the encoder it was trained on"
            )
        scalars = torch.cat([state[k].float().reshape(1) for k in keys])
        transform = self.hparams.get("layer_transformation", "softmax")
        self.weights = sparsemax(scalars) if transform == "sparsemax" else torch.softmax(scalars, dim=0)
        self.gamma = float(state["layerwise_attention.gamma"].float().reshape(-1)[0])

    def _estimator(self, state: dict) -> nn.Sequential:
        hidden = list(self.hparams.get("hidden_sizes") or [])
        width = self.encoder.config.hidden_size * (1 if self.reference_free else 6)
        layers: list[nn.Module] = []
        for i, size in enumerate([*hidden, 1]):
            weight, bias = state.get(f"estimator.ff.{3 * i}.weight"), state.get(f"estimator.ff.{3 * i}.bias")
            if weight is None or bias is None or tuple(weight.shape) != (size, width):
                raise MtkitError(
                    f"{self.where}: estimator.ff.{3 * i} in the checkpoint does not fit hidden_sizes {hidden} on the "
                    f"encoder's {self.encoder.config.hidden_size} units; give the encoder it was trained on"
                )
            linear = nn.Linear(width, size)
            linear.weight.data.copy_(weight.float())
            linear.bias.data.copy_(bias.float())
            layers.append(linear)
            if i < len(hidden):
                layers.append(_activation(self.hparams.get("activations", "Tanh"), "activations", self.where))
            width = size
        if self.hparams.get("final_activation"):
            layers.append(_activation(self.hparams["final_activation"], "final_activation", self.where))
        return nn.Sequential(*layers)

    # -- encoding ------------------------------------------------------------------------------------------------

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenizer(list(texts), truncation=True, max_length=self.max_tokens - 2)["input_ids"]

    def joint_ids(self, mt: Sequence[str], src: Sequence[str]) -> list[list[int]]:
        """CometKiwi's sequences: ``<s> mt </s></s> src </s>``, each segment cut first, the whole to the limit."""
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        return [
            ([cls, *a[1:-1], sep, sep, *b[1:-1], sep])[: self.max_tokens] for a, b in zip(self._ids(mt), self._ids(src))
        ]

    @torch.inference_mode()
    def _pooled(self, sequences: list[list[int]]) -> torch.Tensor:
        """The pooled layer mix of each token sequence, float32, in order: [n, hidden]."""
        out = torch.empty(len(sequences), self.encoder.config.hidden_size)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        pad = self.tokenizer.pad_token_id
        active = [i for i in range(self.n_states) if float(self.weights[i]) != 0.0]
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            width = max(len(sequences[i]) for i in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, : len(sequences[i])] = torch.tensor(sequences[i])
            mask = ids.ne(pad)
            states = self.encoder(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), output_hidden_states=True
            ).hidden_states
            m = mask.to(self.device, torch.float32).unsqueeze(-1)
            count = m.sum(1)  # [b, 1]
            mixed = 0
            for i in active:
                h = states[i].float()
                pooled = (h * m).sum(1) / count if self.pool == "avg" else h[:, 0]
                if self.layer_norm:
                    n = count * h.shape[-1]
                    mean = (h * m).sum((1, 2)).unsqueeze(-1) / n
                    var = (((h - mean.unsqueeze(-1)) * m) ** 2).sum((1, 2)).unsqueeze(-1) / n
                    pooled = (pooled - mean) / torch.sqrt(var + 1e-12)
                mixed = mixed + float(self.weights[i]) * pooled
            out[torch.tensor(rows)] = (self.gamma * mixed).cpu()
        return out

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """COMET-22's sentence embedding of each text (each distinct text encoded once): [n, hidden]."""
        unique = list(dict.fromkeys(texts))
        pooled = self._pooled(self._ids(unique))
        index = {t: i for i, t in enumerate(unique)}
        return pooled[torch.tensor([index[t] for t in texts], dtype=torch.long)]

    @torch.inference_mode()
    def estimate(self, mt: torch.Tensor, src: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        """COMET-22's estimator on sentence embeddings (rows paired up): [n] scores."""
        features = torch.cat((mt, ref, mt * ref, (mt - ref).abs(), mt * src, (mt - src).abs()), dim=1)
        return self._head(features)

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        scores = []
        for start in range(0, features.shape[0], 4096):
            scores.append(self.estimator(features[start : start + 4096].to(self.device)).view(-1).float().cpu())
        return torch.cat(scores) if scores else torch.empty(0)

    # -- scoring -------------------------------------------------------------------------------------------------

    def score(self, mt: Sequence[str], src: Sequence[str], ref: Optional[Sequence[str]] = None) -> list[float]:
        """Each translation's score: [line]."""
        return self.score_systems([mt], src, ref)[0]

    @torch.inference_mode()
    def score_systems(
        self, systems: Sequence[Sequence[str]], src: Sequence[str], ref: Optional[Sequence[str]] = None
    ) -> list[list[float]]:
        """Each system's scores, [system][line]; every distinct text encoded once (COMET-22) across the systems."""
        if self.reference_free:
            return [self._head(self._pooled(self.joint_ids(mt, src))).tolist() for mt in systems]
        if ref is None:
            raise MtkitError(f"{self.where}: a COMET-22 model needs references; give the reference file")
        n = len(src)
        embeddings = self.embed([*src, *ref, *(t for mt in systems for t in mt)])
        src_emb, ref_emb = embeddings[:n], embeddings[n : 2 * n]
        return [
            self.estimate(embeddings[2 * n + k * n : 3 * n + k * n], src_emb, ref_emb).tolist()
            for k in range(len(systems))
        ]


KINDS = {False: "a reference-based (COMET-22) model", True: "a reference-free (CometKiwi) model"}


def load(
    name: str,
    what: str = "comet",
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    batch_size: int = 32,
    reference_free: Optional[bool] = None,
    otherwise: str = "",
) -> Comet:
    """The COMET model ``name`` (a directory in the hub's layout, or a hub name in the local cache).

    Args:
        name: the model's directory or hub name.
        what: what it is for, in messages ("comet", "cometkiwi", "qe": the option ``--{what}-model``).
        device: where it runs.
        dtype: the encoder's dtype (the layer mix and estimator run in float32).
        batch_size: sentences encoded together.
        reference_free: the kind the caller needs (True: CometKiwi, False: COMET-22; None: either); a model of
            the other kind is refused before its weights are read, the message ending in ``otherwise`` (what to
            give instead).

    Raises:
        MtkitError: the model or its encoder is missing, unreadable, refused, of the other kind or does not fit.
    """
    where = resolve(name, f"--{what}-model")
    hparams = _read_hparams(where / "hparams.yaml")
    free = hparams["class_identifier"] == "unified_metric"
    if reference_free is not None and free != reference_free:
        raise MtkitError(f"--{what}-model {name}: {KINDS[free]}; {otherwise}")
    state = _load_checkpoint(where / "checkpoints" / "model.ckpt")
    encoder = hparams.get("pretrained_model")
    if not isinstance(encoder, str) or not encoder:
        raise MtkitError(f"{where / 'hparams.yaml'}: pretrained_model (the encoder's name) is missing")
    return Comet(where, hparams, state, resolve(encoder, "the encoder"), device, dtype, batch_size)
