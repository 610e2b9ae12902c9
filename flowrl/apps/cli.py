"""The ``flowrl`` command: train, tune, evaluate, export, plot, list.

Exit codes: 0 done (a Ctrl-C stop included), 2 bad usage or config (one line, no
traceback), 1 failure during training.

Examples:
    $ flowrl train ppo --env CartPole-v1
    $ flowrl evaluate runs/ppo_CartPole-v1_20261121-130000 --episodes 10
    $ flowrl list
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import flowrl
from flowrl.core.config import ConfigError, not_local, parse_set_value, set_dotted, with_dotted
from flowrl.core.context import EPISODE_RETURN_MEAN, ITERATION, STEPS_SAMPLED
from flowrl.core.tables import print_table
from flowrl.diagnostics.graph import FORMATS
from flowrl.run.logger import check_output_file
from flowrl.run.runner import (
    StopCriteria,
    agent_returns,
    raise_interrupt,
    sigint_ignored,
    signal_handled,
)

if TYPE_CHECKING:
    from flowrl.run.spec import AlgorithmSpec


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line with exit code 2, and keeps the lines
    of a command's examples (its epilog)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"flowrl: error: {message} (see {self.prog} --help)\n")


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: ``_count(1, "run")`` is ``"1 run"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


#: a count's suffixes, as budgets are written: 200k, 1M
SUFFIXES = {"k": 1_000, "m": 1_000_000}


def _whole(text: str) -> int:
    """A whole number, written as one, as a float that is one (``1e6``, ``100_000``), or
    with a k or M suffix (``200k``, ``1.5M``)."""
    scale = SUFFIXES.get(text[-1:].lower(), 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise argparse.ArgumentTypeError(
            f"expected a whole number (200000, 2e5, 200k), got {text!r}"
        )
    return int(value)


def _local(text: str) -> str:
    """A path on this machine: a URI (``s3://``) is a usage error, not a directory named
    ``s3:`` here."""
    why = not_local(text)
    if why:
        raise argparse.ArgumentTypeError(why)
    return text


def _num_workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None


def _add_config_arguments(parser: argparse.ArgumentParser, *, resumes: bool = False) -> None:
    """What ``train``, ``tune`` and ``plan`` share: the algorithm (which a command that
    ``resumes`` may leave to the run it continues), env and config flags."""
    what = "algorithm name (flowrl list) or path/to/file.py:plan"
    if resumes:
        parser.add_argument("algo", nargs="?", help=f"{what}; with --resume, the one resumed")
    else:
        parser.add_argument("algo", help=what)
    parser.add_argument(
        "--env",
        help="gymnasium id or module:ClassOrFactory, imported from the current directory too "
        "(default: the config's, CartPole-v1)",
    )
    parser.add_argument(
        "--num-workers",
        type=_num_workers,
        help="remote rollout workers; 0: no Ray; auto (train's default unless the config or "
        "its preset sets them, or --address names a cluster): measure and pick the fastest "
        "layout",
    )
    parser.add_argument("--num-envs-per-worker", type=int, help="envs per worker")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument(
        "--callbacks",
        metavar="MODULE:CLASS",
        help="your flowrl.Callbacks subclass (episode hooks with the env's info, custom "
        "metrics), imported from the current directory too",
    )
    parser.add_argument("--config", type=_local, help="JSON or TOML file of config values")
    _add_list_argument(
        parser,
        "--set",
        "KEY=VALUE",
        "config values, parsed as JSON (repeatable); a dotted key sets one entry of a "
        "mapping: env_config.size=8",
    )


def _add_run_arguments(parser: argparse.ArgumentParser, *, resumes: bool = False) -> None:
    """What ``train`` and ``tune`` share: the config flags and the stop flags."""
    _add_config_arguments(parser, resumes=resumes)
    parser.add_argument("--stop-reward", type=float, help="stop at this mean episode return")
    parser.add_argument(
        "--stop-timesteps",
        type=_whole,
        help="stop after this many env steps (1e6 and 1M are one too)",
    )
    parser.add_argument("--stop-time", type=float, help="stop after this many seconds")
    parser.add_argument("--stop-iters", type=int, help="stop after this many iterations")
    parser.add_argument(
        "--input", type=_local, metavar="DIR", help="the recording an offline algorithm learns from"
    )


def _add_list_argument(parser: argparse.ArgumentParser, flag: str, metavar: str, text: str) -> None:
    """A flag that takes one or more values, and again: its values in one list."""
    parser.add_argument(flag, action="extend", nargs="+", default=[], metavar=metavar, help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flowrl", description="Distributed RL as a dataflow over Ray actors.")
    parser.add_argument("--version", action="version", version=f"flowrl {flowrl.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_train_parser(sub)
    _add_tune_parser(sub)

    plan = sub.add_parser(
        "plan",
        help="print or draw an algorithm's execution plan as a graph, without training",
        description="Show the operator graph of ALGO's plan (or a file.py:plan) for an env.",
    )
    _add_config_arguments(plan)
    plan.add_argument(
        "--format", choices=FORMATS, help="default: the one --out's suffix names, else text"
    )
    plan.add_argument(
        "-o", "--out", type=_local, help="write to this file (default for png: plan.png here)"
    )
    plan.set_defaults(func=cmd_plan)

    _add_evaluate_parser(sub)
    _add_export_parser(sub)
    _add_plot_parser(sub)

    list_ = sub.add_parser("list", help="list algorithms, or one algorithm's config")
    list_.add_argument("algo", nargs="?", help="show this algorithm's config fields")
    list_.add_argument("--env", help="show the values a run on this env would use (presets)")
    list_.set_defaults(func=cmd_list)
    for command in sub.choices.values():
        command.set_defaults(command_parser=command)  # so a flag it lacks names its --help
        command.epilog = command_examples(command.get_default("func"))
    return parser


def command_examples(func: Callable[..., int]) -> str | None:
    """The examples of a command's docstring, as the end of its ``--help``."""
    _, found, lines = (inspect.getdoc(func) or "").partition("Examples:\n")
    return "examples:\n" + lines + "\n" if found else None


def _add_export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write a checkpoint's greedy policy as an ONNX or TorchScript model"
    )
    export.add_argument("checkpoint", type=_local, help="a checkpoint directory or a run directory")
    export.add_argument(
        "--format",
        choices=("onnx", "torchscript"),
        help="default: the one --out's suffix names (.onnx: onnx; .pt: torchscript), else onnx",
    )
    export.add_argument(
        "-o",
        "--out",
        type=_local,
        help="the model file to write (default: policy.onnx here, or policy.pt with "
        "--format torchscript; POLICY_ID.onnx with --policy-id)",
    )
    export.add_argument(
        "--policy-id", default=None, help="the policy of a multi-agent run's checkpoint"
    )
    export.set_defaults(func=cmd_export)


def _add_plot_parser(sub: Any) -> None:
    plot = sub.add_parser("plot", help="draw runs' learning curves into a PNG")
    plot.add_argument("runs", nargs="+", type=_local, metavar="RUN_DIR",
                      help="run directories, or what holds them (a sweep's --output)")  # fmt: skip
    plot.add_argument(
        "-o",
        "--out",
        type=_local,
        default="curves.png",
        help="the PNG to write (default: %(default)s)",
    )
    plot.set_defaults(func=cmd_plot)


def _add_evaluate_parser(sub: Any) -> None:
    evaluate = sub.add_parser("evaluate", help="evaluate a checkpoint")
    evaluate.add_argument(
        "checkpoint", type=_local, help="a checkpoint directory or a run directory"
    )
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run")
    evaluate.add_argument("--explore", action="store_true", help="sample actions, not greedy")
    evaluate.add_argument(
        "--video", type=_local, metavar="DIR", help="write each episode to DIR as an MP4"
    )
    evaluate.add_argument(
        "--render",
        action="store_true",
        help="show each episode in a window as it plays (the env's render_mode human)",
    )
    evaluate.add_argument(
        "--env",
        help="evaluate on another env of the same spaces (a variant; module:Class for an env "
        "the run was given as an object); default: the checkpoint's",
    )
    _add_list_argument(
        evaluate,
        "--set",
        "KEY=VALUE",
        "env_config values of the env evaluated on (env_config.max_episode_steps=1000)",
    )
    evaluate.add_argument(
        "--seed",
        type=int,
        help="the episodes' seeds start from this (default: the same episodes as every "
        "evaluation's)",
    )
    evaluate.set_defaults(func=cmd_evaluate)


def _add_train_parser(sub: Any) -> None:
    train = sub.add_parser("train", help="train an algorithm", description="Train ALGO on an env.")
    _add_run_arguments(train, resumes=True)
    train.add_argument(
        "-o", "--output", type=_local, help="run directory (default: runs/ALGO_ENV_TIME)"
    )
    train.add_argument("--checkpoint-every", type=int, default=0, help="iterations per checkpoint")
    train.add_argument(
        "--keep-checkpoints", type=int, default=0, metavar="N", help="keep the newest N (0: all)"
    )
    train.add_argument("--resume", type=_local, metavar="DIR", help="continue the run in DIR")
    train.add_argument("--address", help="address of a running Ray cluster to join")
    train.add_argument(
        "--record-experiences",
        type=_local,
        metavar="DIR",
        help="write the experiences the workers sample to DIR (Parquet; the offline extra)",
    )
    train.add_argument(
        "--video",
        action="store_true",
        help="record the evaluation episodes as MP4s in OUTPUT/videos (needs evaluation_interval)",
    )
    train.add_argument(
        "--logger",
        action="append",
        default=[],
        choices=("mlflow", "wandb"),
        help="also send the run to MLflow or wandb (repeatable; the tracking extra)",
    )
    train.add_argument(
        "--mlflow-uri", help="MLflow tracking URI (default: ./mlruns, a local store)"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--profile",
        action="store_true",
        help="record where the plan's time goes (timers/* results) and print a table and "
        "the bottleneck at the end",
    )
    train.set_defaults(func=cmd_train)


def _add_tune_parser(sub: Any) -> None:
    tune = sub.add_parser(
        "tune", help="sweep config values with Ray Tune", description="Sweep ALGO with Ray Tune."
    )
    _add_run_arguments(tune, resumes=True)
    _add_list_argument(
        tune,
        "--grid",
        "KEY=V1,V2",
        "values to try for a config key, comma-separated, or a JSON list for values that are "
        "lists (repeatable: every combination)",
    )
    _add_list_argument(
        tune,
        "--space",
        "KEY=DIST(ARGS)",
        "a range to draw a config key from: uniform(LOW,HIGH), loguniform(LOW,HIGH), "
        "randint(LOW,HIGH) or choice(V1,V2,...) (repeatable)",
    )
    tune.add_argument(
        "--search",
        choices=("random", "optuna"),
        default=TUNE_DEFAULTS["search"],
        help="how trials draw from --space: at random, or Optuna's TPE sampler (its package)",
    )
    tune.add_argument(
        "--num-samples",
        type=int,
        default=TUNE_DEFAULTS["num_samples"],
        help="trials per grid point (with --space: trials)",
    )
    tune.add_argument(
        "--scheduler", choices=("fifo", "asha", "pbt"), default=TUNE_DEFAULTS["scheduler"]
    )
    tune.add_argument(
        "--perturbation-interval",
        type=int,
        default=TUNE_DEFAULTS["perturbation_interval"],
        help="PBT: iterations between exploits",
    )
    tune.add_argument(
        "-o",
        "--output",
        type=_local,
        help="where Tune writes (default: runs/tune_ALGO_ENV_TIME; on a cluster of several "
        "machines, a directory all of them see)",
    )
    tune.add_argument("--address", help="address of a running Ray cluster to sweep on")
    tune.add_argument(
        "--resume",
        type=_local,
        metavar="DIR",
        help="go on with the sweep in DIR (an --output) that was interrupted",
    )
    tune.set_defaults(func=cmd_tune, checkpoint_every=0)


def read_config_file(path: str) -> dict[str, Any]:
    """Config values from a JSON or TOML file; a ConfigError names what is wrong."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.endswith(".toml"):
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"cannot parse config file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    return data


#: what a run's config.json names that belongs to that run alone: where it wrote
RUN_OWN_KEYS = ("evaluation_video_dir", "record_experiences")


def _config_file_values(path: str, algo: str | None) -> dict[str, Any]:
    """``--config``'s values: a JSON or TOML file of them, or a run's ``config.json`` (its
    whole config, so the run repeats exactly: seed, layout and all, but for where it
    wrote), which must be ``algo``'s."""
    data = read_config_file(path)
    if not (set(data) >= {"algo", "config"} and isinstance(data["config"], dict)):
        return data
    from flowrl.run.algorithm import get_algorithm

    if algo and ":" not in algo and get_algorithm(algo).name != data["algo"]:
        raise ConfigError(f"{path} is the config of a {data['algo']} run, not {algo}")
    return {k: v for k, v in data["config"].items() if k not in RUN_OWN_KEYS}


def _config_values(args: argparse.Namespace, output: Path | None = None) -> dict[str, Any]:
    """The config values of the command line; ``output`` is where ``--video`` records."""
    values = _config_file_values(args.config, args.algo) if args.config else {}
    for item in args.set:
        _set_value(values, item)
    flags = {"env": args.env, "num_workers": args.num_workers, "seed": args.seed}
    flags["callbacks"] = args.callbacks
    flags["num_envs_per_worker"] = args.num_envs_per_worker
    values.update({k: v for k, v in flags.items() if v is not None})
    if output is not None and getattr(args, "video", False):
        values["evaluation_video_dir"] = str(output / "videos")
    if getattr(args, "profile", False):
        values["profile"] = True
    for key in ("record_experiences", "input"):
        if getattr(args, key, None):
            values[key] = getattr(args, key)
    return values


def _set_value(values: dict[str, Any], item: str) -> None:
    """``--set KEY=VALUE`` into ``values``; a dotted key (``env_config.size=8``) sets one
    entry of a mapping, over what the config file gave it."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects KEY=VALUE, got '{item}'")
    set_dotted(values, key.strip(), parse_set_value(value))


def _stop_criteria(args: argparse.Namespace) -> Any:
    for name in ("stop_timesteps", "stop_iters"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.stop_time is not None and not (math.isfinite(args.stop_time) and args.stop_time > 0):
        raise ConfigError(f"--stop-time must be a number of seconds > 0, got {args.stop_time}")
    if args.stop_reward is not None and not math.isfinite(args.stop_reward):
        raise ConfigError(f"--stop-reward must be a finite number, got {args.stop_reward}")
    if args.checkpoint_every < 0:
        raise ConfigError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if getattr(args, "keep_checkpoints", 0) < 0:
        raise ConfigError(f"--keep-checkpoints must be >= 0, got {args.keep_checkpoints}")
    return StopCriteria(
        reward=args.stop_reward,
        timesteps=args.stop_timesteps,
        time_s=args.stop_time,
        iters=args.stop_iters,
    )


def _default_output(algo: str, env: str) -> Path:
    name = Path(algo.split(":")[0]).stem if ":" in algo else algo
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}_{env.replace('/', '-').replace(':', '-')}_{stamp}"


def _warn_skipped(ckpt: Any) -> None:
    for reason in ckpt.skipped:
        print(f"flowrl: skipped a checkpoint: {reason}", file=sys.stderr)


def _resume(args: argparse.Namespace, stop: Any) -> tuple[Any, Path]:
    """The algorithm restored from the newest loadable checkpoint of the run to continue,
    after checking that the command names the same algorithm, env and directory, and a
    budget (``stop``'s, or the algorithm's default) the run has not used up."""
    from flowrl.run import checkpoints
    from flowrl.run.algorithm import Algorithm, get_algorithm
    from flowrl.run.logger import hold_run_dir

    output = _resumed_run(Path(args.resume))
    if args.output and Path(args.output).resolve() != output.resolve():
        raise ConfigError(f"--resume continues the run in {output}; drop --output {args.output}")
    ckpt = checkpoints.latest(output)
    hold_run_dir(output).close()  # another process writing it: say so before loading
    saved_algo, saved_env = ckpt.meta["algo"], ckpt.meta["config"].get("env")
    if args.algo and get_algorithm(args.algo).name != saved_algo:
        raise ConfigError(f"--resume {output} holds a {saved_algo} run, not {args.algo}")
    if args.env and args.env != saved_env:
        raise ConfigError(f"--resume {output} trains on {saved_env}, not {args.env}")
    _warn_skipped(ckpt)
    _check_budget_left(stop, ckpt, output)
    values = _config_values(args, output)
    algo = Algorithm.from_checkpoint(ckpt, address=args.address, **values)
    print(f"flowrl: resuming from {ckpt.path} (iteration {algo.iteration})")
    return algo, output


def _check_budget_left(stop: Any, ckpt: Any, output: Path) -> None:
    """A ConfigError when checkpoint ``ckpt`` of the run in ``output`` meets a criterion of
    ``stop`` (the algorithm's default ones when it sets none) already: resumed, it trained
    an iteration more and stopped."""
    from flowrl.run.algorithm import get_algorithm
    from flowrl.run.logger import logged_result

    config = get_algorithm(ckpt.meta["algo"]).config_cls.from_dict(ckpt.meta["config"])
    steps, iters = ckpt.meta["counters"].get(STEPS_SAMPLED, 0), ckpt.meta[ITERATION]
    reached = {**logged_result(output, iters), STEPS_SAMPLED: steps, ITERATION: iters}
    stop.for_config(config).check_left(reached, str(ckpt.path), partial(_larger_flag, stop))


def _larger_flag(stop: Any, field: str) -> str:
    flag = f"--stop-{'time' if field == 'time_s' else field}"
    return f"resume with a larger {flag}" + (" (without one, it is the default)" * stop.is_empty())


def _resumed_run(path: Path) -> Path:
    """The run directory ``--resume`` continues: ``path``, or the run whose newest
    checkpoint ``path`` is; a ConfigError for another checkpoint, saying what to do."""
    from flowrl.run.checkpoints import META_FILE

    if not (path / META_FILE).exists():
        return path
    run, numbered = path.parent.parent, sorted(path.parent.glob("checkpoint_*"))
    if path.parent.name != "checkpoints" or not (run / "config.json").exists():
        raise ConfigError(
            f"{path} is a checkpoint, not a run directory: --resume continues a run that "
            "flowrl train wrote"
        )
    if numbered and numbered[-1].resolve() == path.resolve():
        return run
    numbered_one = path.name.startswith("checkpoint_")
    hint = " (delete the newer ones to go on from it)" if numbered_one else ""
    newest = numbered[-1].name if numbered else "none"
    raise ConfigError(
        f"--resume takes a run directory ({run}) and goes on from its newest checkpoint "
        f"({newest}), not {path.name}{hint}"
    )


def _layout_is_unset(args: argparse.Namespace, values: dict[str, Any]) -> bool:
    """Whether nothing chose the workers (no flag, config file, --set or preset) and no
    cluster is named: then ``flowrl train`` picks them itself (``auto``)."""
    from flowrl.run.algorithm import get_algorithm, preset_values

    if "num_workers" in values or getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"):
        return False
    spec = get_algorithm(args.algo)
    return spec.config_cls.auto_layout and "num_workers" not in preset_values(spec, values)


def _check_input(spec: AlgorithmSpec, values: dict[str, Any]) -> None:
    """A recording named for an algorithm that takes none, or none named for one that
    learns from a recording alone: one line, before the run starts."""
    from flowrl.run.spec import list_algorithms

    # (a plan of your own may read one beside its env: its config has an input)
    if "input" in values and "input" not in spec.config_cls.__dataclass_fields__:
        offline = [a.name for a in list_algorithms() if a.offline]
        raise ConfigError(
            f"--input names a recording for the offline algorithms ({', '.join(offline)}); "
            f"{spec.name} learns from its env (a recording in a plan: docs/offline.md)"
        )
    if spec.offline and not values.get("input"):
        raise ConfigError("no recording to read: name its directory (input, --input DIR)")


def _build(args: argparse.Namespace, values: dict[str, Any], stop: Any) -> Any:
    """The algorithm of a new run, saying what takes time before its first iteration:
    measuring the layout (whose run counts toward ``stop`` and is logged) or starting Ray."""
    from flowrl.run.algorithm import (
        Algorithm,
        build_config,
        check_env,
        check_worker_cpus,
        get_algorithm,
    )

    spec = get_algorithm(args.algo)
    _check_input(spec, values)
    auto = _layout_is_unset(args, values) or values.get("num_workers") == "auto"
    config = build_config(
        spec, {k: v for k, v in values.items() if not (auto and k == "num_workers")}
    )
    stop.for_config(config)  # a budget the run cannot meet (a step budget offline) too
    if auto or config.uses_ray:  # bad input (config, env, spaces): one line, before the news
        check_env(spec, config)
    if config.uses_ray:  # (a machine with too few CPUs for them, too)
        check_worker_cpus(config, args.address)
    if auto:
        print("flowrl: measuring the fastest layout here (a few seconds, half a minute for "
              "envs slow to build such as Atari's; --num-workers sets one)")  # fmt: skip
        return Algorithm.auto(args.algo, values, address=args.address, stop=stop)
    if config.uses_ray:
        where = f"joining Ray at {args.address}" if args.address else "starting Ray"
        actors = "the rollout workers" if config.num_workers else "the plan's actors"
        print(f"flowrl: {where} for {actors}")  # Ape-X's replay shards, offline readers
    return Algorithm(args.algo, values, address=args.address)


def cmd_train(args: argparse.Namespace) -> int:
    """``flowrl train``: an algorithm, or a plan file of yours, trained until a stop criterion.

    Examples:
        flowrl train ppo --env CartPole-v1
        flowrl train dqn --env ALE/Pong-v5 --stop-timesteps 2000000
        flowrl train ppo --env mymodule:MyEnv --set lr=0.001 evaluation_interval=5 --video
        flowrl train my_plan.py:plan --env CartPole-v1 --num-workers 0
        flowrl train --resume runs/ppo_CartPole-v1_TIME --stop-iters 200
    """
    if not (args.algo or args.resume):  # before torch loads: a usage error answers at once
        raise ConfigError("name the algorithm (flowrl list shows them), or --resume RUN_DIR")
    from flowrl.run.logger import ERROR_FILE
    from flowrl.run.presets import preset_for
    from flowrl.run.runner import describe_error, run
    from flowrl.run.tracking import make_trackers

    stop = _stop_criteria(args)
    algo, output = _algorithm_to_train(args, stop)
    if algo.layout is not None:
        print(f"flowrl: {algo.layout.reason}")
    print(f"flowrl: training {algo.spec.name} on {algo.config.env}; writing to {output}")
    preset = preset_for(algo.spec, algo.config.env) if algo.config.preset else None
    if preset is not None and not args.resume:
        print(
            f"flowrl: with the {preset.family} preset for {algo.spec.name} (flowrl list "
            f"{algo.spec.name} --env {algo.config.env} shows it; --set preset=false drops it)"
        )
    try:
        trackers = make_trackers(args.logger, run_dir=output, mlflow_uri=args.mlflow_uri)
        with sigterm_as_interrupt():  # again: ray.init set its own, which ends the process
            summary = run(algo, stop=stop, output_dir=output, trackers=trackers,
                          checkpoint_every=args.checkpoint_every,
                          keep_checkpoints=args.keep_checkpoints,
                          progress=not args.no_progress)  # fmt: skip
        if args.profile:
            print(f"flowrl: where the time went\n{algo.profile()}")
    except ConfigError:
        raise
    except Exception as e:
        where = output / ERROR_FILE
        saved = f"traceback in {where}" if where.is_file() else f"no traceback: {where} not written"
        print(f"flowrl: error: {describe_error(e)}; {saved}", file=sys.stderr)
        return 1
    finally:
        algo.stop()
    print(final_line(summary))
    if algo.config.record_experiences:
        print(_recording_line(algo.config.record_experiences))
    return 0


def _algorithm_to_train(args: argparse.Namespace, stop: StopCriteria) -> tuple[Any, Path]:
    """The algorithm ``flowrl train`` runs, built or resumed, and its run directory; the
    checks that need no Ray (the MLflow server, a new run directory) first."""
    from flowrl.run.algorithm import get_algorithm
    from flowrl.run.logger import check_new_run_dir
    from flowrl.run.tracking import check_server

    if args.mlflow_uri and "mlflow" not in args.logger:
        raise ConfigError("--mlflow-uri names where MLflow logs: add --logger mlflow")
    if "mlflow" in args.logger:  # a server that does not answer: before anything starts
        check_server(args.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI", ""))
    if args.resume:
        return _resume(args, stop)
    if args.output:
        output = Path(args.output)
        check_new_run_dir(output)  # before Ray starts
    else:
        env = _config_values(args).get("env") or get_algorithm(args.algo).config_cls().env
        output = _default_output(args.algo, env)
    return _build(args, _config_values(args, output), stop), output


def _recording_line(directory: str) -> str:
    """What a recording holds once its run ended (the steps of every worker's files)."""
    import pyarrow.parquet as pq

    rows = sum(pq.read_metadata(path).num_rows for path in Path(directory).glob("*/*.parquet"))
    return (
        f"flowrl: the recording in {directory} holds {rows:,} steps "
        f"(an offline algorithm learns from it with --input {directory}: docs/offline.md)"
    )


def final_line(summary: dict[str, Any]) -> str:
    """What ``flowrl train`` says when a run ends: why, after how much, the returns it
    reached (the training episodes', the greedy evaluation's where it evaluated; an offline
    run samples no episodes) and its last checkpoint.

    Examples:
        >>> print(final_line({
        ...     "stopped_by": "iterations", "iterations": 5, "env_steps_sampled": 0,
        ...     "time_total_s": 4.9, "episode_return_mean": math.nan,
        ...     "best_episode_return_mean": math.nan,
        ...     "best_evaluation_episode_return_mean": 489.2, "checkpoint": "c",
        ... }))  # doctest: +ELLIPSIS
        flowrl: stopped by iterations after 5 iterations, 4.9 s: best evaluation return 489.2; ...
    """
    steps = summary[STEPS_SAMPLED]
    iterations = summary["iterations"]
    done = f"{steps} env steps" if steps else f"{iterations} iteration{'s' * (iterations != 1)}"
    returns = []
    if math.isfinite(summary[EPISODE_RETURN_MEAN]):
        agents = ", ".join(f"{a} {r:.1f}" for a, r in agent_returns(summary).items())
        by_agent = f"; by agent {agents}" if agents else ""
        returns.append(
            f"episode_return_mean {summary[EPISODE_RETURN_MEAN]:.1f} "
            f"(best {summary['best_episode_return_mean']:.1f}{by_agent})"
        )
    if "best_evaluation_episode_return_mean" in summary:
        returns.append(
            f"best evaluation return {summary['best_evaluation_episode_return_mean']:.1f}"
        )
    reached = ", ".join(returns) or "no episode finished"
    why = summary["stopped_by"]
    return (
        f"flowrl: {why if why == 'interrupted' else f'stopped by {why}'} after {done}, "
        f"{summary['time_total_s']:.1f} s: {reached}; checkpoint {summary['checkpoint']}"
    )


def _searched(args: argparse.Namespace) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """``flowrl tune``'s grid and ranges, read and checked with its other search flags."""
    from flowrl.apps.sweeps import parse_grid, parse_space

    grid, space = parse_grid(args.grid), parse_space(args.space)
    if not grid and not space:
        raise ConfigError(
            "flowrl tune needs at least one --grid KEY=V1,V2,... or --space KEY=DIST(ARGS)"
        )
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}")
    if args.perturbation_interval < 1:
        raise ConfigError(f"--perturbation-interval must be >= 1, got {args.perturbation_interval}")
    return grid, space


def cmd_tune(args: argparse.Namespace) -> int:
    """``flowrl tune``: a sweep of config values with Ray Tune.

    Examples:
        flowrl tune ppo --grid lr=0.001,0.0003 --stop-iters 50
        flowrl tune ppo --space 'lr=loguniform(1e-5,1e-2)' --num-samples 8 --scheduler asha
        flowrl tune --resume runs/tune_ppo_CartPole-v1_TIME
    """
    from flowrl.apps.sweeps import PBT_DOES_NOT_RESUME, metric, read_sweep, trial_rows
    from flowrl.run.algorithm import get_algorithm

    if not (args.algo or args.resume):  # before Ray loads: a usage error answers at once
        raise ConfigError("name the algorithm (flowrl list shows them), or --resume SWEEP_DIR")
    output, results = _resumed_sweep(args) if args.resume else _new_sweep(args)
    saved = read_sweep(output)
    ranked_by = metric(get_algorithm(saved["algo"]))
    rows = trial_rows(results, saved["keys"], ranked_by)
    print_table(rows)  # (each trial's error was said as it failed: sweeps.SweepProgress)
    failed = sum(1 for row in rows if row["status"].startswith("failed"))
    early = sum(1 for row in rows if row["status"] == "stopped early")
    done = early + sum(1 for row in rows if row["status"] == "done")
    trials = _count(len(rows), "trial")
    early_by = f", {early} stopped early by {saved['scheduler']}" if early else ""
    print(
        f"flowrl: {trials}, {failed} failed{early_by}; Tune's results in {output / 'tune'} "
        f"(flowrl plot {output} --out trials.png draws them)"
    )
    if failed + done < saved["trials"]:  # Ctrl-C or SIGTERM ended Tune's loop (sweeps._fit)
        goes_on = (
            PBT_DOES_NOT_RESUME
            if saved["scheduler"] == "pbt"
            else f"flowrl tune --resume {output} goes on with the trials not done, from their "
            "last checkpoints"
        )
        print(f"flowrl: interrupted; {goes_on}", file=sys.stderr)
        return 130
    return 1 if failed else 0


def _new_sweep(args: argparse.Namespace) -> tuple[Path, Any]:
    """The sweep the flags name, checked before Ray starts, run: its output directory and
    Tune's results."""
    from flowrl.apps.sweeps import check_new_sweep, check_sweep, check_trials, sweep
    from flowrl.rollout.envs import check_env_id
    from flowrl.run.algorithm import build_config, get_algorithm

    stop = _stop_criteria(args)
    grid, space = _searched(args)
    spec = get_algorithm(args.algo)
    fixed = _config_values(args)
    if fixed.get("num_workers") == "auto":  # (the flag's help is train's too)
        raise ConfigError("--num-workers auto is flowrl train's: give a sweep's trials a "
                          "number of workers (0: in-process, its default)")  # fmt: skip
    _check_input(spec, {**fixed, **grid})
    check_sweep(args.algo, grid, space, fixed, args.search, args.scheduler)  # before Ray
    address = args.address or os.environ.get("RAY_ADDRESS")
    # (a cluster's CPUs are counted once joined: sweep() checks again)
    said = check_trials(spec, fixed, grid, space, cpus=math.inf if address else os.cpu_count() or 1)
    # the first trial's, as a trial builds it (an offline algorithm's env: its recording's)
    config = build_config(spec, with_dotted({**fixed, **{k: v[0] for k, v in grid.items()}}))
    check_env_id(config.env)
    output = Path(args.output) if args.output else _default_output(f"tune_{args.algo}", config.env)
    check_new_sweep(output)
    print(
        f"flowrl: sweeping {spec.name} on {config.env} over {', '.join([*grid, *space])}"
        f"{' with Optuna' if args.search == 'optuna' else ''}; writing to {output}"
    )
    if said:
        print(f"flowrl: {said}")
    _start_quiet_ray(address)
    results = sweep(
        args.algo,
        grid,
        fixed=fixed,
        stop=stop.for_config(config).thresholds(),
        storage=output,
        num_samples=args.num_samples,
        scheduler=args.scheduler,
        perturbation_interval=args.perturbation_interval,
        space=space,
        search=args.search,
        seed=config.seed,
    )
    return output, results


#: flowrl tune's flags whose value is not None or [] when not given
TUNE_DEFAULTS = {"search": "random", "num_samples": 1, "scheduler": "fifo",
                 "perturbation_interval": 2}  # fmt: skip


def _resumed_sweep(args: argparse.Namespace) -> tuple[Path, Any]:
    """The sweep in ``--resume``'s directory, gone on with (``sweeps.resume_sweep``) after
    checking that the command names nothing else to sweep: as ``_new_sweep``'s."""
    from flowrl.apps.sweeps import resumable_sweep, resume_sweep
    from flowrl.run.algorithm import get_algorithm

    output = Path(args.resume)
    if args.output and Path(args.output).resolve() != output.resolve():
        raise ConfigError(f"--resume goes on in {output}; drop --output {args.output}")
    kept = ("command", "func", "algo", "resume", "output", "address", "checkpoint_every")
    given = [
        f"--{key.replace('_', '-')}"
        for key, value in vars(args).items()
        if key not in kept and value not in (None, [], TUNE_DEFAULTS.get(key))
    ]
    if given:
        raise ConfigError(
            f"--resume goes on with the sweep in {output} as it was started: drop {given[0]}"
        )
    saved = resumable_sweep(output)  # (before Ray starts)
    if args.algo and get_algorithm(args.algo).name != get_algorithm(saved["algo"]).name:
        raise ConfigError(f"--resume {output} holds a sweep of {saved['algo']}, not {args.algo}")
    print(f"flowrl: resuming the sweep of {saved['algo']} in {output}")
    _start_quiet_ray(args.address)
    return output, resume_sweep(output)


def _start_quiet_ray(address: str | None) -> None:
    """Ray for a sweep's trials, unless it runs (joining the cluster at ``address`` or
    ``RAY_ADDRESS``): their reports go to flowrl's table and lines, not through Ray's
    forwarded output, nor Tune's progress boxes."""
    from flowrl.run.algorithm import ensure_ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ensure_ray(address, log_to_driver=False)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``flowrl evaluate``: greedy episodes of a checkpoint.

    Examples:
        flowrl evaluate runs/ppo_CartPole-v1_TIME --episodes 3 --video videos
        flowrl evaluate runs/ppo_CartPole-v1_TIME --episodes 3 --render
        flowrl evaluate runs/ppo_CartPole-v1_TIME --env CartPole-v0 --seed 1
    """
    from flowrl.apps.inference import resolve_checkpoint
    from flowrl.rollout.worker import EVALUATION_SEED
    from flowrl.run.algorithm import Algorithm

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.video and args.render:
        raise ConfigError("--video writes the episodes and --render shows them: give one")
    ckpt = resolve_checkpoint(args.checkpoint)
    _warn_skipped(ckpt)
    env = _evaluated_env(args, ckpt.meta["config"])
    seed = EVALUATION_SEED if args.seed is None else args.seed
    with Algorithm.from_checkpoint(ckpt, in_process=True, **env) as algo:
        res = algo.evaluate(args.episodes, explore=args.explore, video_dir=args.video,
                            render=args.render, seed=seed)  # fmt: skip
    print(
        f"{algo.spec.name} on {algo.config.env} ({ckpt.path}): episode_return_mean "
        f"{res['episode_return_mean']:.2f} over {res['episodes']} episodes "
        f"(min {res['episode_return_min']:.1f}, max {res['episode_return_max']:.1f}, "
        f"mean length {res['episode_len_mean']:.1f})"
    )
    for key, value in res.items():  # a multi-agent env's agents and policies
        if key.startswith(("agent/", "policy/")):
            print(f"  {key.rsplit('/', 1)[0]}: episode_return_mean {value:.2f}")
    if args.video:
        n = res["episodes"]
        print(
            f"flowrl: {'a video' if n == 1 else 'videos'} of {_count(n, 'episode')} in {args.video}"
        )
    return 0


def _evaluated_env(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    """The config values ``flowrl evaluate``'s ``--env`` and ``--set`` change: the env and
    its ``env_config`` (over the checkpoint's, when it is the same env: another starts from
    none); a ConfigError for another key."""
    values: dict[str, Any] = {}
    if args.env and args.env != config.get("env"):
        values = {"env": args.env, "env_config": {}}
    if args.set:
        values.setdefault("env_config", dict(config.get("env_config", {})))
        for item in args.set:
            _set_value(values, item)
        other = [key for key in values if key not in ("env", "env_config")]
        if other:
            raise ConfigError(
                f"flowrl evaluate --set takes the env's env_config values "
                f"(env_config.KEY=VALUE), not {other[0]}"
            )
    return values


def cmd_plan(args: argparse.Namespace) -> int:
    """``flowrl plan``: a plan's operator graph, printed or drawn, without training.

    Examples:
        flowrl plan impala --format mermaid
        flowrl plan impala --num-workers 2 -o a.png
    """
    from flowrl.run.algorithm import Algorithm, get_algorithm

    fmt, out = _plan_format(args.format, args.out)
    out = check_output_file(out) if out else None
    values = _config_values(args)
    if _layout_is_unset(args, values):  # the fewest workers train may pick: in-process
        values["num_workers"] = get_algorithm(args.algo).config_cls.auto_min_workers
        n = values["num_workers"]
        where = f"with {n} Ray workers" if n else "in-process"
        print(f"flowrl: the plan {where}, the fewest workers train picks (--num-workers N for "
              "another layout)", file=sys.stderr)  # fmt: skip
    algo = Algorithm(args.algo, values)
    try:
        shown = algo.graph().format(fmt)
    finally:
        algo.stop()
    if out is not None:
        if isinstance(shown, bytes):
            out.write_bytes(shown)
        else:
            out.write_text(shown + "\n")
        print(f"flowrl: wrote the plan of {algo.spec.name} to {out} ({fmt})")
    else:
        print(shown)
    return 0


#: the plan format a file's suffix names
PLAN_SUFFIXES = {".png": "png", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid", ".txt": "text"}


def _plan_format(fmt: str | None, out: str | None) -> tuple[str, str | None]:
    """``flowrl plan``'s format and file: ``--format``, else what ``--out``'s suffix
    names, else text; a png goes to ``plan.png`` unless ``--out`` names another file. A
    format the suffix contradicts is a ConfigError."""
    named = PLAN_SUFFIXES.get(Path(out).suffix.lower()) if out else None
    if fmt is not None and named is not None and named != fmt:
        raise ConfigError(f"--out {out} names a {named} file, but --format is {fmt}")
    fmt = fmt or named or "text"
    return fmt, out or ("plan.png" if fmt == "png" else None)


def cmd_export(args: argparse.Namespace) -> int:
    """``flowrl export``: a checkpoint's greedy policy as an ONNX or TorchScript file.

    Examples:
        flowrl export runs/ppo_CartPole-v1_TIME -o policy.onnx
        flowrl export runs/ppo_two_policies --policy-id dqn -o dqn.pt
    """
    from flowrl.apps.inference import (
        default_export_file,
        export_format,
        export_policy,
        resolve_checkpoint,
    )

    out = args.out or default_export_file(args.format, args.policy_id)
    check_output_file(out)
    fmt = export_format(out, args.format)  # before the checkpoint loads
    ckpt = resolve_checkpoint(args.checkpoint)
    _warn_skipped(ckpt)
    out = export_policy(ckpt, out, format=fmt, policy_id=args.policy_id)
    which = f"policy {args.policy_id!r}" if args.policy_id else "greedy policy"
    print(f"flowrl: wrote the {which} of {ckpt.path} to {out} ({fmt})")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """``flowrl plot``: runs' learning curves in a PNG.

    Examples:
        flowrl plot runs/ppo_seed1 runs/ppo_seed2 -o curves.png
        flowrl plot runs/tune_ppo_CartPole-v1_TIME  # a sweep: a curve per trial
    """
    from flowrl.apps.plotting import find_runs, plot_runs

    check_output_file(args.out)
    runs = find_runs(args.runs)
    out = plot_runs(runs, args.out)
    print(f"flowrl: wrote the curves of {_count(len(runs), 'run')} to {out}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """``flowrl list``: the algorithms, or one algorithm's config: on ``--env``, or on its
    default env where a preset applies there (SAC's pendulum), as a run would use it.

    Examples:
        flowrl list
        flowrl list ppo --env ALE/Pong-v5
    """
    from flowrl.rollout.envs import check_env_id
    from flowrl.run.algorithm import build_config, preset_values
    from flowrl.run.presets import preset_for
    from flowrl.run.spec import get_algorithm, list_algorithms

    if args.env and not args.algo:
        raise ConfigError("--env shows one algorithm's settings: flowrl list ALGO --env ID")
    if args.algo:
        spec = get_algorithm(args.algo)
        if args.env:
            check_env_id(args.env)
        print(f"{spec.name}: {spec.summary}\n")
        env = args.env or spec.config_cls().env
        preset = preset_for(spec, env)
        preset_keys: set[str] = set()
        values = {}
        if args.env or preset is not None:  # the default env is named where a preset applies
            preset_keys = set(preset_values(spec, {"env": env}))
            values = build_config(spec, {"env": env}).to_dict()
            if preset is None:
                print(f"{env}: no preset for {spec.name}; the defaults below apply\n")
            else:
                print(f"{env}: the {preset.family} preset (* below): {preset.source}\n")
        for name, default, doc in spec.config_cls.docs():
            value = values.get(name, default)
            mark = "*" if name in preset_keys else " "
            print(f" {mark}{name:<28} {value!s:<14} {doc}")
        return 0
    for spec in list_algorithms():
        print(f"{spec.name:<8} {spec.summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flowrl`` console script."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if os.getcwd() not in sys.path:  # --env mymodule:MyEnv, as python -m would import it
        sys.path.insert(0, os.getcwd())
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    command_parser = vars(args).pop("command_parser")  # not a flag the commands read
    if unknown:
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    ray_was_up = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    try:
        with sigterm_as_interrupt(), _warnings_as_lines():
            return args.func(args)
    except ConfigError as e:
        print(f"flowrl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before training began (a Ctrl-C in training checkpoints)
        print("flowrl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a user plan or env that raises while being built, say
        from flowrl.run.runner import describe_error

        print(f"flowrl: error: {describe_error(e)}", file=sys.stderr)
        return 1
    finally:
        if not ray_was_up:
            _shutdown_ray()


class _LogLine(logging.Handler):
    """A warning of flowrl's as the command's other lines are: ``flowrl: ...`` on stderr
    (Python's last-resort handler printed the bare message)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"flowrl: {self.format(record)}", file=sys.stderr)  # (stderr as it is now)


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """flowrl's warnings said as ``flowrl: ...`` lines inside."""
    logger, handler = logging.getLogger("flowrl"), _LogLine(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def sigterm_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """SIGTERM (``kill``, ``docker stop``, a scheduler's preemption) inside is a Ctrl-C: a
    run writes its last checkpoint and summary, where the signal's default ended the
    process at once (``raise_interrupt``: even where Python drops the exception)."""
    return signal_handled(signal.SIGTERM, raise_interrupt)


def console_main() -> int:
    """The ``flowrl`` command: ``main``, then a quick exit. The interpreter's last
    garbage collections walk every object torch made (0.4-0.8 s after a run, a tenth of
    a CartPole run); frozen, they are skipped. Files, Ray and atexit handlers are closed
    as before."""
    code = main()
    gc.freeze()
    return code


def _shutdown_ray() -> None:
    """Stop the Ray this command started, with Ctrl-C ignored meanwhile: a second Ctrl-C
    inside Ray's shutdown crashed the process (segfault) and left Ray's agents running."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with sigint_ignored():
            ray.shutdown()


if __name__ == "__main__":
    sys.exit(console_main())
