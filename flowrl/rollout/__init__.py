"""Sampling: environments (vector envs, Atari, recording) and rollout workers
(RolloutWorker, WorkerSet)."""
