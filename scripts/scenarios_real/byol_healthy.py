"""BYOL (bootstrap your own latent) in the layout of lucidrains/byol-pytorch: a learner module wraps the online
network (a small conv backbone + an MLP projector with BatchNorm1d) and an online predictor MLP; the target
encoder is created lazily inside the learner's forward, under torch.no_grad(), by copy.deepcopy of the online
encoder with requires_grad set to False (a mock batch sent through the learner in __init__ instantiates it, so it
is a submodule of the learner and its frozen parameters are in learner.parameters() and in the optimizer); the
loss is the symmetric 2 - 2 cos(online prediction of view 1, target projection of view 2) with a stop-gradient on
the target; after every optimizer step the target is updated as an exponential moving average by rebinding
`target_param.data = beta * old + (1 - beta) * new` (beta 0.99), as the reference does. Adam lr 1e-3. A linear
probe (its own Linear and optimizer) on the frozen online backbone measures what was learned.

Data: 16x16 images made in code (8 classes of oriented stripe patterns at random phase), augmentations made in
code (random shift, flip, brightness/contrast jitter, noise), seeded."""
import argparse
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_images(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    theta = (labels % 4).float()[:, None, None] * math.pi / 4
    freq = torch.where(labels < 4, 0.6, 1.2)[:, None, None]
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
    return img.unsqueeze(1), labels


def augment(x):
    n = x.shape[0]
    dx, dy = torch.randint(-3, 4, (2,)).tolist()
    x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
    flip = torch.rand(n, 1, 1, 1) < 0.5
    x = torch.where(flip, x.flip(3), x)
    x = x * (0.6 + 0.8 * torch.rand(n, 1, 1, 1)) + 0.4 * (torch.rand(n, 1, 1, 1) - 0.5)
    return x + 0.3 * torch.randn_like(x)


class Backbone(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        def stage(cin, cout, stride):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True))
        self.features = nn.Sequential(stage(1, width, 1), stage(width, width, 2), stage(width, 2 * width, 2),
                                      stage(2 * width, 2 * width, 1))
        self.out_dim = 2 * width

    def forward(self, x):
        return self.features(x).mean(dim=(2, 3))


def MLP(dim, projection_size, hidden_size):
    return nn.Sequential(nn.Linear(dim, hidden_size), nn.BatchNorm1d(hidden_size), nn.ReLU(inplace=True),
                         nn.Linear(hidden_size, projection_size))


class NetWrapper(nn.Module):
    def __init__(self, net, projection_size, hidden_size):
        super().__init__()
        self.net = net
        self.projector = MLP(net.out_dim, projection_size, hidden_size)

    def forward(self, x):
        representation = self.net(x)
        return self.projector(representation), representation


def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)


class BYOL(nn.Module):
    def __init__(self, net, projection_size=32, hidden_size=128, moving_average_decay=0.99):
        super().__init__()
        self.online_encoder = NetWrapper(net, projection_size, hidden_size)
        self.online_predictor = MLP(projection_size, projection_size, hidden_size)
        self.target_encoder = None
        self.beta = moving_average_decay
        self.forward(torch.randn(2, 1, 16, 16))  # instantiate the target encoder

    def _get_target_encoder(self):
        if self.target_encoder is None:
            target = copy.deepcopy(self.online_encoder)
            for p in target.parameters():
                p.requires_grad = False
            self.target_encoder = target
        return self.target_encoder

    def update_moving_average(self):
        for cur, ma in zip(self.online_encoder.parameters(), self.target_encoder.parameters()):
            ma.data = ma.data * self.beta + (1 - self.beta) * cur.data

    def forward(self, x):
        image_one, image_two = augment(x), augment(x)
        images = torch.cat((image_one, image_two), dim=0)
        online_projections, _ = self.online_encoder(images)
        online_predictions = self.online_predictor(online_projections)
        online_pred_one, online_pred_two = online_predictions.chunk(2, dim=0)
        with torch.no_grad():
            target_projections, _ = self._get_target_encoder()(images)
            target_proj_one, target_proj_two = target_projections.detach().chunk(2, dim=0)
        loss = loss_fn(online_pred_one, target_proj_two) + loss_fn(online_pred_two, target_proj_one)
        return loss.mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    images, labels = make_images(2048, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                         batch_size=args.batch_size, shuffle=True, drop_last=True)
    resnet = Backbone()
    learner = BYOL(resnet)
    opt = torch.optim.Adam(learner.parameters(), lr=args.lr)
    n_iter = 0
    for epoch in range(args.epochs):
        learner.train()
        for x, _ in loader:
            loss = learner(x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            learner.update_moving_average()
            if n_iter % 20 == 0:
                print(f"epoch {epoch} iter {n_iter}: loss {loss.item():.4f}")
            n_iter += 1

    resnet.eval()
    with torch.no_grad():
        feats = resnet(images)
        test_images, test_labels = make_images(512, 2)
        test_feats = resnet(test_images)
    mu, sd = feats.mean(0), feats.std(0) + 1e-6
    probe = nn.Linear(feats.shape[1], 8)
    probe_opt = torch.optim.Adam(probe.parameters(), lr=1e-2)
    for _ in range(100):
        probe_opt.zero_grad()
        probe_loss = F.cross_entropy(probe((feats - mu) / sd), labels)
        probe_loss.backward()
        probe_opt.step()
    acc = (probe((test_feats - mu) / sd).argmax(1) == test_labels).float().mean().item()
    print(f"linear probe: train loss {probe_loss.item():.4f}, test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
