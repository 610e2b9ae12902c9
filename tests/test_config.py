"""Typed configs: coercion, ranges, unknown keys."""

from __future__ import annotations

import pytest

from flowrl.algorithms.ppo import PPOConfig
from flowrl.config import ConfigError, parse_set_value


def test_values_are_coerced_to_field_types():
    cfg = PPOConfig.from_dict({"num_workers": "3", "lr": 1, "model_hiddens": "32,32"})
    assert cfg.num_workers == 3 and cfg.lr == 1.0 and cfg.model_hiddens == (32, 32)
    assert PPOConfig.from_dict({"model_hiddens": parse_set_value("[16]")}).model_hiddens == (16,)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lrr": 0.1}, "unknown config key 'lrr' for ppo (did you mean 'lr'?)"),
        ({"num_workers": -1}, "num_workers must be >= 0"),
        ({"lr": 0}, "lr must be > 0"),
        ({"gamma": 1.5}, "gamma must be <= 1"),
        ({"num_workers": "two"}, "num_workers expects int, got 'two'"),
        ({"num_sgd_iter": 2.5}, "num_sgd_iter expects int"),
        ({"device": "tpu"}, "device must be one of auto, cpu, cuda"),
        ({"model_hiddens": [0]}, "model_hiddens must be >= 1"),
    ],
)
def test_bad_values_name_the_field(values, message):
    with pytest.raises(ConfigError) as err:
        PPOConfig.from_dict(values)
    assert message in str(err.value)


def test_round_trip_through_dict():
    cfg = PPOConfig(lr=3e-4, model_hiddens=(8,))
    assert PPOConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(seed=3).seed == 3
