"""mtkit CLI with cuDNN's SDPA backend switched off (diagnostic)."""
import sys
import torch
torch.backends.cuda.enable_cudnn_sdp(False)
from mtkit.cli import main
sys.exit(main(sys.argv[1:]))
