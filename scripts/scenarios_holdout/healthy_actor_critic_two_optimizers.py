"""Control: actor-critic on a contextual bandit, with separate actor and critic optimizers.

Each iteration samples contexts, the actor samples an arm, the
environment returns a noisy reward. The critic (value baseline) is
fitted with MSE by its own Adam optimizer; the actor is updated with the
policy-gradient loss -(log pi(a|s) * advantage.detach()) minus an entropy
bonus, by a second Adam optimizer. Two backward passes and two
optimizer steps per iteration. The actor loss hovers around zero and
changes sign by design (advantages are centred); what improves is the
average reward (~0.3 -> ~0.9) and the critic's MSE falls.
"""
import argparse

import torch
import torch.nn as nn


class ActorCritic(nn.Module):
    def __init__(self, ctx_dim=8, n_arms=4, hidden=32):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(ctx_dim, hidden), nn.Tanh(), nn.Linear(hidden, n_arms))
        self.critic = nn.Sequential(nn.Linear(ctx_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


class Bandit:
    def __init__(self, ctx_dim=8, n_arms=4):
        self.w = torch.randn(ctx_dim, n_arms)

    def sample(self, n):
        return torch.randn(n, self.w.shape[0])

    def reward(self, ctx, arms):
        best = (ctx @ self.w).argmax(dim=1)
        return (arms == best).float() + 0.1 * torch.randn(len(arms))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--iters", type=int, default=70)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--entropy", type=float, default=0.01)
    args = parser.parse_args()

    torch.manual_seed(0)
    env = Bandit()
    model = ActorCritic()
    actor_opt = torch.optim.Adam(model.actor.parameters(), lr=args.lr)
    critic_opt = torch.optim.Adam(model.critic.parameters(), lr=args.lr)

    for it in range(args.iters):
        ctx = env.sample(args.batch_size)
        dist = torch.distributions.Categorical(logits=model.actor(ctx))
        arms = dist.sample()
        reward = env.reward(ctx, arms)

        value = model.critic(ctx).squeeze(-1)
        critic_loss = (value - reward).pow(2).mean()
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()

        advantage = (reward - value).detach()
        actor_loss = -(dist.log_prob(arms) * advantage).mean() - args.entropy * dist.entropy().mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()

        if it % 10 == 0:
            print(f"iter {it:3d} reward {reward.mean().item():.3f} critic {critic_loss.item():.4f} actor {actor_loss.item():+.4f}")
    print(f"final reward {reward.mean().item():.3f} critic {critic_loss.item():.4f} actor {actor_loss.item():+.4f}")


if __name__ == "__main__":
    main()
