"""Typed configs: coercion, ranges, unknown keys."""

from __future__ import annotations

import dataclasses
import re

import pytest

from flowrl import list_algorithms
from flowrl.algorithms.ppo import PPOConfig
from flowrl.core.config import RLLIB_BUILDER, Config, ConfigError, parse_set_value


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
        # RLlib's names (its new API stack's, and its model dict)
        ({"num_epochs": 5}, "flowrl's name for it: 'num_sgd_iter'"),
        ({"num_env_runners": 2}, "flowrl's name for it: 'num_workers'"),
        ({"framework": "torch"}, "flowrl runs on torch: leave it out"),
        ({"model": {"fcnet_hiddens": [64]}}, "model_hiddens (fcnet_hiddens), use_lstm"),
    ],
)
def test_bad_values_name_the_field(values, message):
    with pytest.raises(ConfigError) as err:
        PPOConfig.from_dict(values)
    assert message in str(err.value)


def test_rllibs_builder_and_another_librarys_key_name_flowrls_way():
    """PPOConfig().environment("CartPole-v1").training(lr=...) and config.learning_rate
    were a bare AttributeError."""
    config, setting = PPOConfig(), "PPOConfig(env=..., lr=...), or config.replace"
    for call, way in [
        (lambda: config.environment("CartPole-v1"), setting),
        (lambda: config.training(lr=1e-3), setting),
        (lambda: config.build(), "flowrl's way: Algorithm('ppo', config)"),
        (lambda: config.learning_rate, "flowrl's way: config.lr"),
        (lambda: config.gama, "did you mean 'gamma'"),
    ]:  # fmt: skip
        with pytest.raises(AttributeError, match=re.escape(way)):
            call()
    assert getattr(config, "learning_starts", 0) == 0 and not hasattr(config, "_private")

    @dataclasses.dataclass
    class Broken(PPOConfig):
        @property
        def broken(self) -> int:
            return self.no_such_field  # (its own error, not "no attribute 'broken'")

    with pytest.raises(AttributeError, match="no attribute 'no_such_field'"):
        _ = Broken().broken
    for spec in list_algorithms():  # no builder method is a key of flowrl's
        assert not set(RLLIB_BUILDER) & set(spec.config_cls.__dataclass_fields__)


def test_seed_none_draws_a_seed_that_the_config_keeps():
    drawn = {PPOConfig(seed=None).seed for _ in range(3)}
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in drawn) and len(drawn) > 1
    config = PPOConfig(seed=None)
    assert PPOConfig.from_dict(config.to_dict()).seed == config.seed  # as saved, it repeats


def test_round_trip_through_dict():
    cfg = PPOConfig(lr=3e-4, model_hiddens=(8,))
    assert PPOConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(seed=3).seed == 3


def test_an_override_keeps_the_base_fields_doc_and_range():
    @dataclasses.dataclass
    class Faster(PPOConfig):
        lr: float = 3e-3

    assert Faster().lr == 3e-3 and Faster.doc("lr") == Config.doc("lr")
    with pytest.raises(ConfigError, match="lr must be > 0"):
        Faster(lr=0.0)


@pytest.mark.parametrize("spec", list_algorithms(), ids=lambda s: s.name)
def test_algorithm_configs_state_only_what_they_change(spec):
    """A field inherited from a base config keeps the base's doc and range."""
    for base in spec.config_cls.__mro__[1:]:
        for name, field in getattr(base, "__dataclass_fields__", {}).items():
            mine = spec.config_cls.__dataclass_fields__[name]
            assert mine.metadata == field.metadata, f"{spec.name} restates {name}"


def test_a_config_with_two_bases_keeps_the_defaults_its_nearer_base_changed():
    from flowrl.algorithms.appo import APPOConfig
    from flowrl.algorithms.impala import IMPALAConfig

    appo, impala = APPOConfig(), IMPALAConfig()
    for name in ("rollout_fragment_length", "gae_lambda", "entropy_coeff"):
        assert getattr(appo, name) == getattr(impala, name), name
    assert appo.grad_clip == 40.0  # its own, stated in appo.py
    assert appo.clip_param == 0.3 and "clip range" in APPOConfig.doc("clip_param")


def test_a_schedulable_value_is_a_number_or_points_of_env_steps():
    cfg = PPOConfig.from_dict({"lr": parse_set_value("[[0, 3e-4], [1e6, 0]]"), "entropy_coeff": 0})
    assert cfg.lr == ((0.0, 3e-4), (1e6, 0.0)) and cfg.entropy_coeff == 0.0
    assert PPOConfig.from_dict(cfg.to_dict()) == cfg  # through config.json and back
    for value, message in (
        ([[0, 1e-3], [10, -1]], "lr must be >= 0"),  # a schedule may end on 0, not below
        ([[0, 1e-3], [5, 1e-3], [1, 1e-4]], "env steps that never go back"),
        ([[5, 1e-3], [10, 1e-4]], "starts at env step 0"),  # it says where it starts
        ([[0, 1e-3], [1e400, 0]], "its steps finite"),  # was written as Infinity
        ([[0, 0]], "lr must be > 0"),  # as the constant 0 is
        ([[0, 0], [10, 1e-3]], "lr must be > 0"),
        ([1e-3, 1e-4], "a number or a schedule"),
        ([[0, 1e-3, 2]], "a number or a schedule"),
        (0, "lr must be > 0"),  # a constant keeps the field's range
    ):
        with pytest.raises(ConfigError, match=message):
            PPOConfig(lr=value)


def test_a_schedule_is_piecewise_linear_and_held_at_its_ends():
    from flowrl.core.schedules import scheduled

    points = ((100.0, 1.0), (200.0, 0.0), (300.0, 0.5))
    assert [scheduled(points, s) for s in (0, 100, 150, 200, 250, 300, 1e9)] == [
        1.0, 1.0, 0.5, 0.0, 0.25, 0.5, 0.5
    ]  # fmt: skip


def test_an_algorithms_config_is_fixed_and_the_one_it_was_given_is_not():
    """``algo.config.lr = 1e-4`` in a notebook did nothing (the optimiser was built) and
    said nothing; it is now refused, as RLlib's frozen configs refuse it."""
    from flowrl import Algorithm

    given = PPOConfig(num_workers=0, lr=1e-3)
    algo = Algorithm("ppo", given)
    try:
        with pytest.raises(ConfigError, match=r"fixed once built: lr .* or one whose lr is a sch"):
            algo.config.lr = 1e-4
        with pytest.raises(ConfigError, match=r"build another with gamma=\.\.\.$"):
            algo.config.gamma = 0.9
        assert algo.config.lr == 1e-3 and algo.train()["env_steps_trained"] > 0
    finally:
        algo.stop()
    given.lr = 1e-4  # the caller's own stays theirs to change
    assert given.lr == 1e-4 and algo.config == given.replace(lr=1e-3)
