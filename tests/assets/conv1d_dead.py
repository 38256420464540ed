"""7 of the 8 channels of a Conv1d are dead from the start (bias -100 under a ReLU: never > 0, so no
gradient ever revives them); the rest of the model trains normally. Not chaotic: the dead channels
are dead whatever the float kernels."""
import torch

torch.manual_seed(0)
conv = torch.nn.Conv1d(4, 8, 3)
with torch.no_grad():
    conv.bias[:7] = -100.0
model = torch.nn.Sequential(conv, torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 30, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 4, 32)
y = x.mean(dim=(1, 2)).unsqueeze(1)
for step in range(40):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("done")
