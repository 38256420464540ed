"""neuraldbg: observe an unmodified PyTorch training script and explain why training fails."""

__version__ = "0.1.0"
