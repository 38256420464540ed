"""Benchmark training script: an ordinary PyTorch training loop that times its own steps.

Run plainly (`python scripts/bench_train.py --model mlp`) or under observation
(`neuraldbg run scripts/bench_train.py --model mlp`); the script is the same either way. `--peer` switches
on one of the alternatives a user might pick instead of neuraldbg (they are part of the script, as a user
would write them):

    anomaly  torch.autograd.set_detect_anomaly(True)
    wandb    wandb.init(mode="offline") + wandb.watch(model, log="all", log_freq=--log-freq), loss logged
             every step; where wandb is not installed, an emulation of what watch does (per-parameter
             weight and gradient histograms, torch.histc + .cpu(), every --log-freq steps)
    naive    per-module forward hooks computing mean/std/zero-frac/absmax with .item() each, plus
             per-parameter gradient hooks computing the grad norm with .item() (the original NeuralDBG design)

Options for the GPU benchmark (scripts/bench_gpu.py; the defaults leave the script as it was):

    --gpt-size gpu       the gpt model at GPT-2-small shape (12 layers, d 768, context 1024, vocab 50304,
                         batches of 8 x 1024 tokens) instead of the small CPU one
    --compile MODE       torch.compile(model) (MODE default) or torch.compile(model, mode=MODE)
                         (reduce-overhead: CUDA graphs), after the peer is set up on the model
    --amp bf16           forward and loss under torch.autocast(bfloat16)

Timing: `--warmup` steps are run first, then `--steps` steps are timed in chunks of `--chunk` consecutive
steps (each chunk's mean step time; a chunk of 10 contains exactly one of neuraldbg's default sampled
steps, so the sampled steps' cost is counted, not hidden by a median). The last stdout line is a JSON
object: median chunk step time (ms), every chunk, and a SHA-256 of the final parameters (identical with
and without neuraldbg: it must not change training).
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- models (each step >= ~20 ms on one CPU thread)

class MLP(nn.Module):
    def __init__(self, d_in=512, width=1024, depth=4, n_out=10):
        super().__init__()
        layers, d = [], d_in
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, n_out=10):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

        self.features = nn.Sequential(block(3, 32), block(32, 32), nn.MaxPool2d(2), block(32, 64), block(64, 64),
                                      nn.MaxPool2d(2), block(64, 128), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(128, n_out)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class Encoder(nn.Module):
    def __init__(self, d_in=64, d=128, layers=4, n_out=10):
        super().__init__()
        self.proj = nn.Linear(d_in, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, n_out)

    def forward(self, x):
        return self.head(self.encoder(self.proj(x)).mean(1))


class LSTMLM(nn.Module):
    def __init__(self, vocab=2000, d=128, hidden=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        out, _ = self.lstm(self.emb(idx))
        return self.head(out)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab=2000, d=128, layers=4, heads=4, ctx=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for emb in (self.tok, self.pos):
            nn.init.normal_(emb.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


GPT_SIZES = {  # (GPT kwargs, batch size, sequence length)
    "small": (dict(vocab=2000, d=128, layers=4, heads=4, ctx=128), 4, 64),
    "gpu": (dict(vocab=50304, d=768, layers=12, heads=12, ctx=1024), 8, 1024),
}


def setup(name, device, gpt_size="small"):
    """(model, optimizer, batches, loss function) for one benchmark model; data made once, on device.
    gpt_size="gpu" (gpt only): GPT-2-small shape with batches of 8 x 1024 tokens, for a GPU."""
    g = torch.Generator().manual_seed(1)
    if name == "tiny":  # for the scale benchmark: as small as a model gets
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = [(torch.randn(16, 8, generator=g), torch.randint(0, 2, (16,), generator=g)) for _ in range(8)]
        loss = F.cross_entropy
    elif name == "mlp":
        model = MLP()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batches = [(torch.randn(64, 512, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(8)]
        loss = F.cross_entropy
    elif name == "cnn":
        model = CNN()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        batches = [(torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(8)]
        loss = F.cross_entropy
    elif name == "transformer":
        model = Encoder()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        batches = [(torch.randn(8, 32, 64, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(8)]
        loss = F.cross_entropy
    elif name == "lstm":
        model = LSTMLM()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        seqs = [torch.randint(0, 2000, (8, 33), generator=g) for _ in range(8)]
        batches = [(s[:, :-1], s[:, 1:]) for s in seqs]
        loss = lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))  # noqa: E731
    elif name == "gpt":
        kwargs, batch, seq = GPT_SIZES[gpt_size]
        model = GPT(**kwargs)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        seqs = [torch.randint(0, kwargs["vocab"], (batch, seq + 1), generator=g) for _ in range(8)]
        batches = [(s[:, :-1], s[:, 1:]) for s in seqs]
        loss = lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))  # noqa: E731
    else:
        raise SystemExit(f"unknown model {name}")
    model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    return model, opt, batches, loss


# ---------------------------------------------------------------- peers

def naive_hooks(model):
    """The original NeuralDBG design: host syncs per module and per parameter, every step."""
    log = []

    def fwd(mod, inp, out):
        if isinstance(out, torch.Tensor) and out.is_floating_point() and torch.is_grad_enabled():
            o = out.detach()
            log.append((o.mean().item(), o.std().item(), (o == 0).float().mean().item(), o.abs().max().item()))

    for m in model.modules():
        m.register_forward_hook(fwd)
    for p in model.parameters():
        if p.requires_grad:
            p.register_hook(lambda g: log.append(g.norm().item()))
    return log


def watch_wandb(model, log_freq):
    """wandb.watch(log="all") offline; returns a function to call once per step with the loss."""
    try:
        import wandb
    except ImportError:
        return emulate_watch(model, log_freq), True
    os.environ.setdefault("WANDB_SILENT", "true")
    where = tempfile.mkdtemp(prefix="wandb-bench-")
    run = wandb.init(project="neuraldbg-bench", mode="offline", dir=where)
    wandb.watch(model, log="all", log_freq=log_freq)

    def log(loss):
        wandb.log({"loss": loss.item()})

    def finish():
        run.finish()
        shutil.rmtree(where, ignore_errors=True)

    log.finish = finish
    return log, False


def emulate_watch(model, log_freq):
    """What wandb.watch(log="all") does when wandb is missing: weight and grad histograms to the host."""
    state = {"step": 0}
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def log(loss):
        state["step"] += 1
        loss.item()
        if state["step"] % log_freq == 0:
            for _, p in params:
                for t in (p.detach(), p.grad):
                    if t is not None:
                        t = t.float()
                        torch.histc(t, bins=64, min=t.min().item(), max=t.max().item()).cpu().tolist()

    log.finish = lambda: None
    return log


# ---------------------------------------------------------------- the loop

def current_rss_kb():
    """Resident set size now (not the peak), in KiB; the peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def params_sha(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def compile_counters():
    """What torch.compile did: graphs compiled, graph breaks, CUDA-graph skips (torch._dynamo's counters)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # noqa: BLE001
        return {}
    return {"graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
            "cudagraph_skips": sum(v for k, v in counters["inductor"].items() if "cudagraph_skip" in k)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "transformer", "lstm", "gpt", "tiny"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--peer", default="none", choices=["none", "anomaly", "wandb", "naive"])
    ap.add_argument("--log-freq", type=int, default=10)
    ap.add_argument("--rss-every", type=int, default=0, help="record the current RSS every N steps (scale benchmark)")
    ap.add_argument("--gpt-size", default="small", choices=sorted(GPT_SIZES), help="gpt model size (gpu: GPT-2 small)")
    ap.add_argument("--compile", default="none", choices=["none", "default", "reduce-overhead", "max-autotune"],
                    help="torch.compile(model) with this mode (reduce-overhead uses CUDA graphs)")
    ap.add_argument("--amp", default="none", choices=["none", "bf16"], help="forward and loss under autocast")
    args = ap.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model, opt, batches, loss_fn = setup(args.model, device, args.gpt_size)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    peer_log, emulated = None, False
    if args.peer == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    elif args.peer == "naive":
        naive_hooks(model)
    elif args.peer == "wandb":
        peer_log, emulated = watch_wandb(model, args.log_freq)
    if args.compile != "none":  # the optimizer holds the same parameters; peers' hooks are on the modules inside
        model = torch.compile(model, **({} if args.compile == "default" else {"mode": args.compile}))
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp == "bf16")

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if peer_log is not None:
            peer_log(loss)
        return loss

    model.train()
    rss = []
    for i in range(args.warmup):
        step(i)
    chunks, cpu_chunks = [], []
    i = args.warmup
    for _ in range(max(1, args.steps // args.chunk)):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.chunk):
            step(i)
            i += 1
            if args.rss_every and i % args.rss_every == 0:
                rss.append((i, current_rss_kb()))
        sync()
        chunks.append((time.perf_counter() - t0) / args.chunk * 1e3)
        cpu_chunks.append((time.process_time() - c0) / args.chunk * 1e3)
    loss = step(i).item()
    if peer_log is not None:
        peer_log.finish()
    extra = {}
    if args.gpt_size != "small" or args.compile != "none" or args.amp != "none":
        extra.update(gpt_size=args.gpt_size, compile=args.compile, amp=args.amp)
    if device.type == "cuda":
        extra["cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    if args.compile != "none":
        extra.update(compile_counters())
    print(json.dumps({"model": args.model, "peer": args.peer, "wandb_emulated": emulated,
                      "step_ms": statistics.median(chunks), "chunks_ms": [round(c, 3) for c in chunks],
                      "cpu_ms": statistics.median(cpu_chunks),
                      "loss": loss if math.isfinite(loss) else None, "params_sha": params_sha(model),
                      "steps": i + 1, "rss_kb": rss, **extra}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
