import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
with torch.no_grad():
    print(model(torch.randn(3, 4)).shape)
