"""REINFORCE policy gradient in the layout of pytorch/examples reinforcement_learning/reinforce.py: a policy MLP
(Linear -> Dropout -> ReLU -> Linear -> softmax) samples actions one environment step at a time through
torch.distributions.Categorical and keeps their log-probabilities; at the end of each episode the discounted
returns are computed, normalised to zero mean / unit variance, and the loss sum(-log_prob * return) is
back-propagated through all the episode's forward passes; Adam lr 1e-2, one optimizer step per episode, stop when
the running reward passes the threshold.

The policy-gradient loss is not a quantity that goes down: with normalised returns it changes sign from episode to
episode and its size follows the episode length. What improves is the reward. The environment is a small
cart-pole written here (the classic equations of motion, Euler steps of 0.02 s, failure when the pole passes 12
degrees or the cart leaves +-2.4, episodes capped at 200 steps), seeded with its own generator."""
import argparse
import math
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, seed, max_steps=200):
        self.g = torch.Generator().manual_seed(seed)
        self.max_steps = max_steps

    def reset(self):
        self.state = (torch.rand(4, generator=self.g) * 0.1 - 0.05).tolist()
        self.t = 0
        return torch.tensor(self.state)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        thetaacc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * cos / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.t += 1
        terminated = abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360
        truncated = self.t >= self.max_steps
        return torch.tensor(self.state), 1.0, terminated, truncated


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.dropout(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=543)
    ap.add_argument("--max-episodes", type=int, default=300)
    ap.add_argument("--log-interval", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    env = CartPole(args.seed)
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    eps = torch.finfo(torch.float32).eps

    def select_action(state):
        probs = policy(state.unsqueeze(0))
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        returns = deque()
        for r in policy.rewards[::-1]:
            R = r + args.gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = [-log_prob * R for log_prob, R in zip(policy.saved_log_probs, returns)]
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item()

    running_reward = 10
    for i_episode in range(1, args.max_episodes + 1):
        state, ep_reward = env.reset(), 0
        while True:
            action = select_action(state)
            state, reward, terminated, truncated = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        loss = finish_episode()
        if i_episode % args.log_interval == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage reward: {running_reward:.2f}"
                  f"\tloss {loss:.3f}")
        if running_reward > 150:
            print(f"Solved! Running reward is now {running_reward:.2f} after {i_episode} episodes")
            break
    print(f"episodes (optimizer steps): {i_episode}")


if __name__ == "__main__":
    main()
