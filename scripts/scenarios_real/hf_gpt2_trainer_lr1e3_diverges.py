"""HF Trainer layout, broken: the tiny GPT-2 of hf_gpt2_trainer_healthy.py with learning_rate=1e3 (a typo for 1e-3).

AdamW at lr 1000 throws the weights far from anything sensible on the first steps after warm-up: the loss leaves
ln(64) ~ 4.2 for values in the thousands and beyond (see labels.json for the plain run)."""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

VOCAB, CTX = 64, 24


class BigramTokens(Dataset):
    def __init__(self, n, seed):
        table = torch.randint(0, VOCAB, (VOCAB, 3), generator=torch.Generator().manual_seed(99))
        g = torch.Generator().manual_seed(seed)
        ids = torch.empty(n, CTX, dtype=torch.long)
        ids[:, 0] = torch.randint(0, VOCAB, (n,), generator=g)
        for t in range(1, CTX):
            ids[:, t] = table[ids[:, t - 1], torch.randint(0, 3, (n,), generator=g)]
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--learning-rate", type=float, default=1e3)  # bug: 1e3, not 1e-3
    ap.add_argument("--max-steps", type=int, default=150)
    ap.add_argument("--output-dir", default=None)
    args = ap.parse_args()
    set_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=CTX, n_embd=48, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=args.output_dir or tmp, per_device_train_batch_size=16, learning_rate=args.learning_rate,
            max_steps=args.max_steps, warmup_steps=5, weight_decay=0.01, logging_steps=10, save_strategy="no",
            report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True)
        trainer = Trainer(model=model, args=training_args, train_dataset=BigramTokens(1024, 1))
        out = trainer.train()
    print(f"train_loss {out.training_loss:.4f} global_step {out.global_step}")


if __name__ == "__main__":
    main()
