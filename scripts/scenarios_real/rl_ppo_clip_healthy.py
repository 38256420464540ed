"""PPO with the clipped surrogate objective in the layout of CleanRL's ppo.py: an Agent with separate critic and
actor MLPs (64-64 tanh, orthogonal init with gain sqrt(2), 1.0 for the value head, 0.01 for the policy head),
rollouts of num_steps x num_envs stored in preallocated tensors under no_grad, the value of the last state
bootstrapped into GAE (gamma 0.99, lambda 0.95), then update_epochs = 4 passes over the flattened batch in
shuffled minibatches (4 per epoch): advantages normalised per minibatch, the clipped policy loss
max(-A * ratio, -A * clip(ratio, 1 - 0.2, 1 + 0.2)).mean(), the clipped value loss, an entropy bonus (0.01),
loss = pg_loss - ent_coef * entropy + vf_coef * v_loss, clip_grad_norm_ 0.5, Adam eps 1e-5 with the learning
rate annealed linearly to 0 over the iterations.

The total loss is no quantity that falls: the policy loss is a surrogate around 0 that changes sign, the value
loss follows the returns, which grow as the episodes get longer, and each iteration's rollout is a new batch.
What improves is the episode return. The environment is the small cart-pole of rl_reinforce_healthy.py,
vectorised over the envs as tensors (auto-reset on termination, episodes capped at 200 steps), seeded."""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical


class VecCartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, num_envs, seed, max_steps=200):
        self.n = num_envs
        self.g = torch.Generator().manual_seed(seed)
        self.max_steps = max_steps
        self.state = torch.zeros(num_envs, 4)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.ep_return = torch.zeros(num_envs)
        self.finished = []

    def _reset_where(self, mask):
        k = int(mask.sum())
        if k:
            self.state[mask] = torch.rand(k, 4, generator=self.g) * 0.1 - 0.05
            self.t[mask] = 0
            self.ep_return[mask] = 0.0

    def reset(self):
        self._reset_where(torch.ones(self.n, dtype=torch.bool))
        return self.state.clone()

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        thetaacc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * cos / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = torch.stack([x, x_dot, theta, theta_dot], 1)
        self.t += 1
        self.ep_return += 1.0
        terminated = (x.abs() > 2.4) | (theta.abs() > 12 * 2 * math.pi / 360)
        truncated = self.t >= self.max_steps
        done = terminated | truncated
        reward = torch.ones(self.n)
        self.finished.extend(self.ep_return[done].tolist())
        self._reset_where(done)
        return self.state.clone(), reward, done


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--total-timesteps", type=int, default=20480)
    ap.add_argument("--learning-rate", type=float, default=2.5e-3)
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--num-steps", type=int, default=128)
    ap.add_argument("--anneal-lr", type=int, default=1)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--gae-lambda", type=float, default=0.95)
    ap.add_argument("--num-minibatches", type=int, default=4)
    ap.add_argument("--update-epochs", type=int, default=4)
    ap.add_argument("--clip-coef", type=float, default=0.2)
    ap.add_argument("--ent-coef", type=float, default=0.01)
    ap.add_argument("--vf-coef", type=float, default=0.5)
    ap.add_argument("--max-grad-norm", type=float, default=0.5)
    args = ap.parse_args()
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size

    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = VecCartPole(args.num_envs, args.seed)
    agent = Agent(4, 2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs, 4))
    actions = torch.zeros((args.num_steps, args.num_envs))
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    next_obs = envs.reset()
    next_done = torch.zeros(args.num_envs)
    optimizer_steps = 0
    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(args.num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, done = envs.step(action)
            rewards[step] = reward
            next_done = done.float()

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs.reshape((-1, 4))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                end = start + minibatch_size
                mb_inds = b_inds[start:end]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                newvalue = newvalue.view(-1)
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(
                    newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                optimizer_steps += 1

        recent = envs.finished[-20:]
        mean_ret = sum(recent) / max(1, len(recent))
        print(f"iteration {iteration}: lr {optimizer.param_groups[0]['lr']:.2e}  episodic return (last 20) "
              f"{mean_ret:.1f}  pg {pg_loss.item():+.4f}  v {v_loss.item():.3f}  ent {entropy_loss.item():.3f}  "
              f"kl {approx_kl.item():.4f}  clipfrac {np.mean(clipfracs):.3f}")
    print(f"optimizer steps: {optimizer_steps}")


if __name__ == "__main__":
    main()
