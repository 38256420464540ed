"""Neural style transfer in the layout of the PyTorch "Neural Transfer Using PyTorch" tutorial (Gatys et al.): a
frozen conv feature network (here a small VGG-like stack, seeded random weights, since nothing is downloaded)
is rebuilt as an nn.Sequential with a Normalization module first and transparent ContentLoss / StyleLoss
modules inserted after chosen conv layers (each stores its MSE against a detached target: the content image's
features, or the style image's Gram matrices); the model is put in eval mode with requires_grad_(False); the
INPUT IMAGE (a copy of the content image) is the only thing optimized: the tutorial's LBFGS([input_img]) is
replaced by Adam([input_img], lr 0.02), the common variant (LBFGS with the clamp inside the closure jumps between
line searches on these random features), each step runs the model, sums style_weight * style + content_weight
* content, calls backward and steps, then clamps the image to [0, 1] under no_grad.

The optimizer holds no model parameter at all: the network is frozen by design, and the image is a leaf tensor
updated in place. The loss falls fast and then slowly (style 1e6 weight on Gram matrices of random features).
The content and style "images" are synthetic 3x48x48 tensors made in the script (smooth shapes; stripes)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = mean.clone().detach().view(-1, 1, 1)
        self.std = std.clone().detach().view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


def make_features():
    """A small VGG-like feature extractor (conv-relu blocks with max pooling), seeded random weights."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
    ).eval()


def get_style_model_and_losses(cnn, mean, std, style_img, content_img,
                               content_layers=("conv_4",), style_layers=("conv_1", "conv_2", "conv_3", "conv_4",
                                                                          "conv_5")):
    normalization = Normalization(mean, std)
    content_losses, style_losses = [], []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = f"pool_{i}"
        else:
            raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module(f"style_loss_{i}", style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], (ContentLoss, StyleLoss)):
            break
    return model[:(i + 1)], style_losses, content_losses


def run_style_transfer(cnn, mean, std, content_img, style_img, input_img, num_steps, style_weight, content_weight,
                       lr):
    model, style_losses, content_losses = get_style_model_and_losses(cnn, mean, std, style_img, content_img)
    input_img.requires_grad_(True)
    model.eval()
    model.requires_grad_(False)
    optimizer = torch.optim.Adam([input_img], lr=lr)
    for step in range(num_steps):
        optimizer.zero_grad()
        model(input_img)
        style_score = sum(sl.loss for sl in style_losses) * style_weight
        content_score = sum(cl.loss for cl in content_losses) * content_weight
        loss = style_score + content_score
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            input_img.clamp_(0, 1)
        if step % 25 == 0 or step == num_steps - 1:
            print(f"step {step}: style loss {style_score.item():.4f}  content loss {content_score.item():.4f}")
    return input_img, num_steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--style-weight", type=float, default=1e6)
    ap.add_argument("--content-weight", type=float, default=1)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    s = args.size
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, s), torch.linspace(-1, 1, s), indexing="ij")
    disc = ((xx + 0.3) ** 2 + (yy - 0.2) ** 2 < 0.25).float()
    square = ((xx - 0.4).abs() < 0.3).float() * ((yy + 0.4).abs() < 0.3).float()
    content_img = torch.stack([0.2 + 0.7 * disc, 0.3 + 0.5 * square, 0.5 - 0.3 * disc]).unsqueeze(0)
    stripes = 0.5 + 0.5 * torch.sin(12 * xx + 6 * yy)
    style_img = torch.stack([stripes, 1 - stripes, 0.5 * stripes + 0.25]).unsqueeze(0)
    style_img = (style_img + 0.05 * torch.randn_like(style_img)).clamp(0, 1)
    cnn = make_features()
    mean = torch.tensor([0.485, 0.456, 0.406])
    std = torch.tensor([0.229, 0.224, 0.225])
    input_img = content_img.clone()
    output, outer = run_style_transfer(cnn, mean, std, content_img, style_img, input_img, args.num_steps,
                                       args.style_weight, args.content_weight, args.lr)
    print(f"output range {output.min().item():.3f}..{output.max().item():.3f}, "
          f"distance to content {F.mse_loss(output, content_img).item():.4f}")
    print(f"optimizer steps: {outer}")


if __name__ == "__main__":
    main()
