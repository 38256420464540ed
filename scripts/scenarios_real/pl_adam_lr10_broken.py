"""Lightning layout, broken: the LightningModule of pl_module_healthy.py with Adam at lr 10.

Every Adam step moves each weight by up to 10: the logits reach the thousands within a few steps and the
cross-entropy with them (see labels.json for the plain run)."""
import argparse

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def patterns(n, seed, classes=4):
    protos = torch.randn(classes, 1, 12, 12, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    return TensorDataset(protos[y] + 0.8 * torch.randn(n, 1, 12, 12, generator=g), y)


class LitConvNet(L.LightningModule):
    def __init__(self, lr=1e-3, classes=4):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(16 * 3 * 3, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=10.0)  # bug: Adam at lr 10
    ap.add_argument("--max-epochs", type=int, default=3)
    ap.add_argument("--accumulate-grad-batches", type=int, default=1)
    args = ap.parse_args()
    L.seed_everything(0)
    train = DataLoader(patterns(1536, 1), batch_size=32, shuffle=True)
    val = DataLoader(patterns(256, 2), batch_size=128)
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accumulate_grad_batches=args.accumulate_grad_batches, log_every_n_steps=8)
    model = LitConvNet(lr=args.lr)
    trainer.fit(model, train, val)
    m = trainer.callback_metrics
    print(f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f} global_step {trainer.global_step}")


if __name__ == "__main__":
    main()
