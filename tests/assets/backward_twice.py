"""Fails inside loss.backward() (a second backward through a freed graph): python's traceback goes
through torch.autograd.backward, which neuraldbg wraps."""
import torch

w = torch.ones(3, requires_grad=True)
loss = (w * w).sum()
loss.backward()
loss.backward()
