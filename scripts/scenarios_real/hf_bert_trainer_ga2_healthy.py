"""HF Trainer layout: a tiny BERT (BertForSequenceClassification built from a BertConfig, no download) with
gradient_accumulation_steps=2, on synthetic sequences.

Label: whether the first token comes from the upper half of the vocabulary (what BERT's pooler reads), with a
padded tail (attention_mask 0) of random length. 4 micro-batches of 16 = 2 optimizer steps per 64 examples."""
import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

VOCAB, LEN, PAD = 50, 20, 0


class CountingTask(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (n, LEN), generator=g)
        lengths = torch.randint(LEN // 2, LEN + 1, (n,), generator=g)
        self.mask = (torch.arange(LEN)[None, :] < lengths[:, None]).long()
        self.ids = self.ids * self.mask  # PAD = 0 after the end
        self.labels = (self.ids[:, 0] >= VOCAB // 2).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--grad-accum", type=int, default=2)
    args = ap.parse_args()
    set_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LEN, num_labels=2, pad_token_id=PAD)
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=16, gradient_accumulation_steps=args.grad_accum,
            learning_rate=args.learning_rate, num_train_epochs=args.epochs, logging_steps=10, save_strategy="no",
            report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True)
        trainer = Trainer(model=model, args=training_args, train_dataset=CountingTask(1280, 1))
        out = trainer.train()
    print(f"train_loss {out.training_loss:.4f} global_step {out.global_step}")


if __name__ == "__main__":
    main()
