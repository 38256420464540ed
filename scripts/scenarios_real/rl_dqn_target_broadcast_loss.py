"""Broken DQN (a target without its action axis): rl_dqn_target_healthy.py, the layout of the PyTorch "Reinforcement
Learning (DQN)" tutorial and CleanRL's dqn.py, with one edit that is a classic of DQN re-implementations: the
TD target r + gamma * max_a' Q_target(s', a') (shape [128]) goes into SmoothL1Loss without the tutorial's
.unsqueeze(1), against Q(s, a) gathered with shape [128, 1]. The loss broadcasts the two to [128, 128] (PyTorch
only warns "Using a target size that is different to the input size"), so every Q(s_i, a_i) is regressed to the
mean of ALL the batch's targets: the Q-values still climb with the bootstrapped targets and the loss looks like
the healthy run's, but they no longer tell states or actions apart and the greedy policy never improves
(episode durations stay ~10-60 where the healthy run reaches the 200-step cap after ~50 episodes).

Everything else is the healthy script: Q-network 4 -> 128 -> 128 -> 2, replay memory of 10000, epsilon-greedy
with exponential decay, batch 128, AdamW lr 1e-3 amsgrad, gradient values clipped at 100, soft target update
(tau 0.005), on the small cart-pole written in the script, seeded."""
import argparse
import math
import random
from collections import deque, namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, seed, max_steps=200):
        self.g = torch.Generator().manual_seed(seed)
        self.max_steps = max_steps

    def reset(self):
        self.state = (torch.rand(4, generator=self.g) * 0.1 - 0.05).tolist()
        self.t = 0
        return list(self.state)

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
        return list(self.state), 1.0, terminated, truncated


class ReplayMemory:
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)

    def push(self, *args):
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class DQN(nn.Module):
    def __init__(self, n_observations, n_actions):
        super().__init__()
        self.layer1 = nn.Linear(n_observations, 128)
        self.layer2 = nn.Linear(128, 128)
        self.layer3 = nn.Linear(128, n_actions)

    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--eps-start", type=float, default=0.9)
    ap.add_argument("--eps-end", type=float, default=0.05)
    ap.add_argument("--eps-decay", type=float, default=1000)
    ap.add_argument("--tau", type=float, default=0.005)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--num-episodes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    env = CartPole(args.seed)
    n_actions, n_observations = 2, 4

    policy_net = DQN(n_observations, n_actions)
    target_net = DQN(n_observations, n_actions)
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = torch.optim.AdamW(policy_net.parameters(), lr=args.lr, amsgrad=True)
    memory = ReplayMemory(10000)
    steps_done = 0
    optimizer_steps = 0

    def select_action(state):
        nonlocal steps_done
        sample = random.random()
        eps_threshold = args.eps_end + (args.eps_start - args.eps_end) * math.exp(-1.0 * steps_done / args.eps_decay)
        steps_done += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        return torch.tensor([[random.randrange(n_actions)]], dtype=torch.long)

    def optimize_model():
        nonlocal optimizer_steps
        if len(memory) < args.batch_size:
            return None
        transitions = memory.sample(args.batch_size)
        batch = Transition(*zip(*transitions))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
        state_batch = torch.cat(batch.state)
        action_batch = torch.cat(batch.action)
        reward_batch = torch.cat(batch.reward)

        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(args.batch_size)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * args.gamma) + reward_batch

        criterion = nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        optimizer_steps += 1
        return loss.item(), state_action_values.mean().item()

    durations = []
    for i_episode in range(args.num_episodes):
        state = torch.tensor(env.reset(), dtype=torch.float32).unsqueeze(0)
        losses, qs = [], []
        for t in range(10 ** 6):
            action = select_action(state)
            observation, reward, terminated, truncated = env.step(action.item())
            reward = torch.tensor([reward])
            done = terminated or truncated
            next_state = None if terminated else torch.tensor(observation, dtype=torch.float32).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            out = optimize_model()
            if out is not None:
                losses.append(out[0])
                qs.append(out[1])
            # soft update of the target network's weights: theta' <- tau * theta + (1 - tau) * theta'
            target_net_state_dict = target_net.state_dict()
            policy_net_state_dict = policy_net.state_dict()
            for key in policy_net_state_dict:
                target_net_state_dict[key] = (policy_net_state_dict[key] * args.tau
                                              + target_net_state_dict[key] * (1 - args.tau))
            target_net.load_state_dict(target_net_state_dict)
            if done:
                durations.append(t + 1)
                break
        if (i_episode + 1) % 5 == 0:
            mean_loss = sum(losses) / max(1, len(losses))
            mean_q = sum(qs) / max(1, len(qs))
            print(f"episode {i_episode + 1}: duration {durations[-1]} (mean of last 5: "
                  f"{sum(durations[-5:]) / 5:.1f})  td loss {mean_loss:.4f}  mean Q {mean_q:.2f}")
    print(f"optimizer steps: {optimizer_steps}")


if __name__ == "__main__":
    main()
