"""Healthy word-LM layout: model(tokens, hidden) with int64 tokens, the hidden state returned by the model
and repackaged (detached) for the next batch, as in pytorch/examples' word_language_model. The hidden
state is not data; the tokens are."""
import torch
import torch.nn as nn
from common import args

a = args(steps=60, lr=3e-3, vocab=20)
torch.manual_seed(0)


class LM(nn.Module):
    def __init__(self, vocab, d=32):
        super().__init__()
        self.emb, self.rnn, self.out = nn.Embedding(vocab, d), nn.LSTM(d, d), nn.Linear(d, vocab)

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.emb(tokens), hidden)
        return self.out(out), hidden


corpus = (torch.arange(4000) * 7 % a.vocab).view(-1, 8)  # a predictable sequence, 8 streams
model = LM(a.vocab)
opt = torch.optim.Adam(model.parameters(), lr=a.lr)
hidden = (torch.zeros(1, 8, 32), torch.zeros(1, 8, 32))
for step in range(a.steps):
    i = (step * 10) % (len(corpus) - 11)
    data, target = corpus[i:i + 10], corpus[i + 1:i + 11]
    hidden = tuple(h.detach() for h in hidden)
    opt.zero_grad()
    output, hidden = model(data, hidden)
    loss = nn.functional.cross_entropy(output.view(-1, a.vocab), target.reshape(-1))
    loss.backward()
    opt.step()
print("final loss", loss.item())
