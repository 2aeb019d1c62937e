"""``python -m explorer ...``: the core from the command line, as text or JSON.

Errors are one line on stderr. A bad argument, or a project error (``ExplorerError``),
exits with code 2 and names what was wrong; anything unexpected exits with code 1 and
says to run again with ``--debug``, which shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

from . import hardware, models
from .diff import diff
from .errors import ExplorerError
from .ir import format_flops, format_graph
from .training import plan_training, stacks

__all__ = ["CLIError", "build_parser", "check_output_path", "main"]

#: ``report -o`` is refused up front when its folder has less free space than this.
MIN_FREE_BYTES = 16 * 2**20


class CLIError(ExplorerError, ValueError):
    """A command-line argument is invalid; the message names the argument."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so `main` reports
    every error the same way (one line, exit code 2) and stays callable in-process."""

    def error(self, message: str):  # type: ignore[override]
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not > 0; give a positive integer")
    return value


def _argument(name: str, value, load):
    """``load(value)``, with a project error reported as a bad ``name`` argument."""
    try:
        return load(value)
    except ExplorerError as e:
        raise CLIError(f"argument {name}: {e}") from None


def check_output_path(path: str, name: str = "-o/--output") -> Path:
    """Refuse an output file that cannot be written, before any work starts.

    A directory, a missing folder, a folder or file without write permission, and a disk
    with less than ``MIN_FREE_BYTES`` free all raise `CLIError` naming the argument.
    """
    out = Path(path)
    folder = out.parent if str(out.parent) else Path(".")
    why = None
    if out.is_dir():
        why = "is a directory; give a file name such as report.html"
    elif not folder.is_dir():
        why = f"folder {str(folder)!r} does not exist; create it first"
    elif out.exists() and not os.access(out, os.W_OK):
        why = "exists and is not writable"
    elif not out.exists() and not os.access(folder, os.W_OK | os.X_OK):
        why = f"folder {str(folder)!r} is not writable"
    elif shutil.disk_usage(folder).free < MIN_FREE_BYTES:
        why = f"the disk holding it has under {MIN_FREE_BYTES // 2**20} MiB free"
    if why:
        raise CLIError(f"argument {name}: {path!r} {why}")
    return out


def _load_model(args):
    return _argument("model", args.model, models.load)


def _summary(args) -> int:
    cfg = _load_model(args)
    graph = models.build(cfg, batch=args.batch, seq=args.seq)
    info = graph.summary()
    info["config"] = str(cfg)
    info["published_params"] = cfg.published_params
    info["source"] = cfg.source
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(info["config"])
    print(f"parameters {graph.num_params():,} (published {cfg.published_params_text or '-'})")
    print(f"forward    {format_flops(graph.flops())} for batch {args.batch}")
    print(f"nodes      {info['nodes']} {info['ops_by_group']}")
    return 0


def _ir(args) -> int:
    graph = models.build(_load_model(args), batch=args.batch, seq=args.seq)
    print(format_graph(graph, limit=args.lines))
    return 0


def _plan_job(args, cfg, **kwargs):
    """`plan_training` of the job the command's `_job_arguments` and --stack name."""
    return plan_training(
        cfg, devices=args.devices, hardware=args.hardware,
        global_batch=args.global_batch, seq=args.seq, stack=args.stack, **kwargs,
    )  # fmt: skip


def _plan(args) -> int:
    cfg = _load_model(args)
    _argument("--hardware", args.hardware, hardware.load)
    plan = _plan_job(args, cfg, top_k=args.top)
    print(plan.to_json() if args.json else plan.report(robust=args.robustness or None))
    return 0


def _diff(args) -> int:
    """Two configurations of one job, side by side; ``plan`` stands for the chosen one."""
    cfg = _load_model(args)
    _argument("--hardware", args.hardware, hardware.load)
    sides = [args.a, args.b]
    if "plan" in sides:
        plan = _plan_job(args, cfg)
        sides = [plan if x == "plan" else x for x in sides]
        d = diff(*sides)
    else:
        d = diff(*sides, model=cfg, hardware=args.hardware, global_batch=args.global_batch,
                 seq=args.seq or cfg.max_seq_len, stack=args.stack)  # fmt: skip
    print(json.dumps(d.as_dict(), indent=2) if args.json else d.text())
    return 0


def _why_not(args) -> int:
    """Plan the job, then answer "why not CONFIG?" (`TrainingPlan.why_not`)."""
    cfg = _load_model(args)
    _argument("--hardware", args.hardware, hardware.load)
    plan = _plan_job(args, cfg)
    answer = plan.why_not(args.config)
    print(json.dumps(answer.as_dict(), indent=2) if args.json else str(answer))
    return 0


def _report(args) -> int:
    """Drawn with plotly by the widgets package, which the core must not import: the command
    is found through the ``explorer.commands`` entry point that package declares."""
    from importlib.metadata import entry_points

    # Everything the command reads is checked before the (long) plan is computed.
    check_output_path(args.output)
    _load_model(args)
    _argument("--hardware", args.hardware, hardware.load)
    found = entry_points(group="explorer.commands", name="report")
    if not found:
        raise CLIError(
            "no 'report' command is installed; install the project with its notebook extra: "
            "`pip install -e '.[notebook]'`"
        )
    try:
        run = next(iter(found)).load()
    except ImportError as e:
        raise CLIError(
            f"the HTML report needs the notebook extra ({e.name or e} is missing); install it "
            "with `pip install -e '.[notebook]'`"
        ) from None
    return run(args)


def _list(args) -> int:
    names = models.names() if args.what == "models" else hardware.names()
    print(json.dumps(list(names)) if args.json else "\n".join(names))
    return 0


def _job_arguments(s: argparse.ArgumentParser) -> None:
    """The job a training command plans: --devices, --hardware, --global-batch, --seq."""
    s.add_argument("--devices", type=_positive, required=True)
    s.add_argument("--hardware", default="a100-80g")
    s.add_argument("--global-batch", type=_positive, required=True)
    s.add_argument("--seq", type=_positive, default=None)


def _stack_argument(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--stack", choices=stacks.names(), default=None,
        help=f"the training stack whose settings the step model uses (default "
        f"{stacks.DEFAULT_STACK}; python -c 'import explorer as ex; "
        f"print(ex.stacks.get(\"torchtitan\").table())' lists one)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m explorer", description=__doc__)
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    for what in ("models", "hardware"):
        s = sub.add_parser(what, help=f"list the {what} catalog")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=_list, what=what)
    for name, func, help_ in (("summary", _summary, "parameters, FLOPs and node counts"),
                              ("ir", _ir, "the text IR of the forward graph")):  # fmt: skip
        s = sub.add_parser(name, help=help_)
        s.add_argument("model", help="a zoo name or a model .json file")
        s.add_argument("--batch", type=_positive, default=1)
        s.add_argument("--seq", type=_positive, default=None)
        if name == "summary":
            s.add_argument("--json", action="store_true")
        else:
            s.add_argument("--lines", type=_positive, default=40, help="node lines to print")
        s.set_defaults(func=func)
    s = sub.add_parser("plan", help="the fastest DP x TP x PP x ZeRO x recompute plan that fits")
    s.add_argument("model", help="a zoo name or a model .json file")
    _job_arguments(s)
    s.add_argument("--top", type=_positive, default=5, help="alternatives to show")
    _stack_argument(s)
    s.add_argument("--json", action="store_true", help="write the TrainingPlan as JSON")
    s.add_argument("--robustness", action="store_true",
                   help="scan how far each knob can move before an alternative wins "
                   "(re-simulates the alternatives: seconds on large models)")  # fmt: skip
    s.set_defaults(func=_plan)
    s = sub.add_parser("diff", help="two configurations side by side, b - a term by term")
    s.add_argument("model", help="a zoo name or a model .json file")
    s.add_argument("a", help="'plan' (the chosen configuration) or one such as 'dp16 tp8 pp8'")
    s.add_argument("b", help="the same; text changes the other side's plan in what it names")
    _job_arguments(s)
    _stack_argument(s)
    s.add_argument("--json", action="store_true", help="write the diff as JSON")
    s.set_defaults(func=_diff)
    s = sub.add_parser("why-not", help="why the plan is not CONFIG, e.g. 'dp16 tp8'")
    s.add_argument("model", help="a zoo name or a model .json file")
    s.add_argument("config", help="a configuration such as 'dp16 tp8' (changes the plan's)")
    _job_arguments(s)
    _stack_argument(s)
    s.add_argument("--json", action="store_true", help="write the answer as JSON")
    s.set_defaults(func=_why_not)
    s = sub.add_parser("report", help="one standalone HTML page: the plan and its figures")
    s.add_argument("model", help="a zoo name or a model .json file")
    s.add_argument("--devices", type=_positive, required=True)
    s.add_argument("--hardware", default="a100-80g")
    s.add_argument("--global-batch", type=_positive, default=None, help="default: one per device")
    s.add_argument("--seq", type=_positive, default=None)
    s.add_argument("--layers", type=_positive, default=2, help="layers drawn in the graph")
    s.add_argument("-o", "--output", default="report.html")
    s.add_argument("--trace", default=None,
                   help="a PyTorch profiler trace (file or folder): adds its breakdown and its "
                   "step next to the predicted one")  # fmt: skip
    _stack_argument(s)
    s.set_defaults(func=_report)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 2 bad input, 1 unexpected error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # accepted anywhere on the line, not only before the command
    argv = [a for a in argv if a != "--debug"]
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except ExplorerError as e:
        if debug:
            traceback.print_exc()
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # writing output: a full disk, a path that vanished meanwhile
        if debug:
            traceback.print_exc()
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            traceback.print_exc()
        print(
            f"error: unexpected {type(e).__name__}: {_one_line(e)} "
            "(a bug; run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


if __name__ == "__main__":
    raise SystemExit(main())
