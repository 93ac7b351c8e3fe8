"""Luong probe: 150 updates with a different parameter initialisation (monkeypatched; run 21:37-21:41 UTC, before `model.param_init` existed: torch-default is now `param_init: 0`).

python results/2026-11-23-session6/luong-probe-init.py {torch-default|xavier}
"""
import sys

import torch
from torch import nn

import mtkit.models.rnn as rnn
from mtkit.cli import main


def torch_default(model, init_range=None):  # what each module's own reset_parameters gave: Embedding N(0, 1), LSTM +-1/sqrt(h), ...
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def xavier(model, init_range=None):  # matrices Xavier-uniform, embeddings N(0, embed_dim^-1/2), biases 0 (LSTM forget gate 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.zero_()
                if "bias_hh" in name:
                    param[param.numel() // 4 : param.numel() // 2] = 1.0
            elif "embed" in name:
                nn.init.normal_(param, 0.0, param.size(1) ** -0.5)
            else:
                nn.init.xavier_uniform_(param)
        for module in model.modules():
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


kind = sys.argv[1]
rnn._init_parameters = {"torch-default": torch_default, "xavier": xavier}[kind]
sys.exit(main(["train", "configs/multi30k-luong.yaml", "--set", "training.max_updates=150",
               "--set", "training.validate_every=100000", "--set", f"training.run_dir=/tmp/probe-init-{kind}"]))
