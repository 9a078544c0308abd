"""PPO for causal LMs with LoRA and a reward function (RAGE's RL stage, METHODS §7).

- :mod:`.objectives`: the arithmetic (reward placement, GAE, whitening, clipped policy and value
  losses, KL controllers) as tensor functions, tested by hand;
- :mod:`.loop`: :func:`~.loop.train_ppo`, rollouts and updates with a value head on the policy's
  backbone and the adapter-disabled model as the reference.

Nothing here is imported at package import: both modules load torch.
"""
