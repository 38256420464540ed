"""Healthy twin of transformer_postln_nowarmup_plateau.py: the same 12-layer Post-LN nn.TransformerEncoder
(norm_first=False) and AdamW at lr 5e-3, with a 30-step linear learning-rate warm-up then linear decay (the
standard BERT-style schedule). The loss falls from 2.95 to ~0.01."""
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[1:1] = ["--warmup", "30"]
    runpy.run_path(str(Path(__file__).with_name("transformer_postln_nowarmup_plateau.py")), run_name="__main__")
