"""Healthy actor-critic on a contextual bandit: separate actor and critic models, two optimizers stepped
each iteration. The critic's value (detached) enters the actor's loss as the advantage baseline."""
import torch
import torch.nn as nn
from common import args

a = args(steps=80, lr=3e-3)
torch.manual_seed(0)
W = torch.randn(6, 3)
actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
opt_a = torch.optim.Adam(actor.parameters(), lr=a.lr)
opt_c = torch.optim.Adam(critic.parameters(), lr=a.lr)
for step in range(a.steps):
    state = torch.randn(64, 6)
    dist = torch.distributions.Categorical(logits=actor(state))
    action = dist.sample()
    reward = (state @ W).gather(1, action[:, None]).squeeze(1)
    value = critic(state).squeeze(1)
    critic_loss = nn.functional.mse_loss(value, reward)
    opt_c.zero_grad()
    critic_loss.backward()
    opt_c.step()
    actor_loss = -(dist.log_prob(action) * (reward - value.detach())).mean()
    opt_a.zero_grad()
    actor_loss.backward()
    opt_a.step()
print("final loss", critic_loss.item(), actor_loss.item())
