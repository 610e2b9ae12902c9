"""Running an algorithm: Algorithm, the runner (stop criteria, logging, checkpoints,
evaluation, recovery), checkpoints, logging, tracking, presets and AlgorithmSpec."""
