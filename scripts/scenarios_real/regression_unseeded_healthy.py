"""Regression layout (pytorch/examples regression style): fit a degree-4 polynomial with a single Linear layer on
polynomial features of random x, batch after batch, until the batch loss drops below 1e-3; no optimizer: the
update is a manual param.add_(-lr * param.grad) after each backward; no seed, so every run differs (a different
target polynomial, different batches and a different number of batches).

The script prints how many batches (updates) it took."""
import torch
import torch.nn.functional as F

POLY_DEGREE = 4
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    return x.mm(W_target) + b_target.item()


def get_batch(batch_size=32):
    random = torch.randn(batch_size)
    x = make_features(random)
    return x, f(x)


def main():
    fc = torch.nn.Linear(W_target.size(0), 1)
    batch_idx = 0
    while True:
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        loss = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss.backward()
        with torch.no_grad():
            for param in fc.parameters():
                param.add_(-0.1 * param.grad)
        batch_idx += 1
        if loss.item() < 1e-3:
            break
        if batch_idx % 200 == 0:
            print(f"batch {batch_idx} loss {loss.item():.6f}")
    print(f"Loss: {loss.item():.6f} after {batch_idx} batches")


if __name__ == "__main__":
    main()
