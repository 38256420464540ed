"""Broken actor-critic (log-probabilities saved as floats): the pytorch/examples reinforcement_learning
actor_critic.py layout with one "memory saving" edit: select_action stores m.log_prob(action).item() instead of
the tensor. The policy loss -log_prob * advantage is then a plain float times a detached advantage, so the sum
policy_loss + value_loss only back-propagates through the value head: the actor head (action_head) never gets a
gradient and the policy stays at its initial, nearly uniform action distribution. The shared body (affine1) and
the critic (value_head) still train, the value loss falls, and nothing crashes.

Layout: Policy with a shared affine1 and two heads (action_head -> softmax, value_head), SavedAction namedtuple,
select_action samples from Categorical, finish_episode computes discounted returns (gamma 0.99), normalises them,
sums the actor and smooth-L1 critic losses and takes one Adam step (lr 3e-2 as in the example) per episode.
Environment: a 1-D corridor made in code (start in the middle, reward +1 at the right end, -0.01 per step,
episodes of at most 20 steps) instead of gym's CartPole: no downloads."""
import argparse
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


class Corridor:
    def __init__(self, n=9, max_steps=20):
        self.n, self.max_steps = n, max_steps

    def reset(self):
        self.pos, self.t = self.n // 2, 0
        return self.obs()

    def obs(self):
        o = torch.zeros(self.n)
        o[self.pos] = 1.0
        return o

    def step(self, action):
        self.pos = max(0, min(self.n - 1, self.pos + (1 if action == 1 else -1)))
        self.t += 1
        done = self.pos == self.n - 1 or self.t >= self.max_steps
        reward = 1.0 if self.pos == self.n - 1 else -0.01
        return self.obs(), reward, done


class Policy(nn.Module):
    def __init__(self, n_obs=9, n_actions=2):
        super().__init__()
        self.affine1 = nn.Linear(n_obs, 64)
        self.action_head = nn.Linear(64, n_actions)
        self.value_head = nn.Linear(64, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


def select_action(model, state, g):
    probs, state_value = model(state)
    action = torch.multinomial(probs, 1, generator=g).item()
    m = Categorical(probs)
    model.saved_actions.append(SavedAction(m.log_prob(torch.tensor(action)).item(), state_value))  # BUG: .item()
    return action


def finish_episode(model, optimizer, gamma, eps=1e-6):
    R, returns = 0.0, []
    for r in model.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    if len(returns) > 1:
        returns = (returns - returns.mean()) / (returns.std() + eps)
    policy_losses, value_losses = [], []
    for (log_prob, value), R in zip(model.saved_actions, returns):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value.squeeze(), R))
    optimizer.zero_grad()
    loss = torch.tensor(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
    del model.rewards[:]
    del model.saved_actions[:]
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--lr", type=float, default=3e-2)
    ap.add_argument("--episodes", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    env, model = Corridor(), Policy()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    running = 0.0
    for ep in range(args.episodes):
        state, ep_reward = env.reset(), 0.0
        for _ in range(100):
            action = select_action(model, state, g)
            state, reward, done = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running = 0.05 * ep_reward + 0.95 * running
        loss = finish_episode(model, optimizer, args.gamma)
        if ep % 20 == 0:
            p_right = model(env.reset())[0][1].item()
            print(f"episode {ep} reward {ep_reward:.2f} running {running:.3f} loss {loss:.4f} p(right) {p_right:.3f}")


if __name__ == "__main__":
    main()
