"""``python -m explorer ...``: the core from the command line, as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from . import hardware, models
from .ir import format_flops, format_graph

__all__ = ["main"]


def _summary(args) -> int:
    cfg = models.load(args.model)
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
    graph = models.build(models.load(args.model), batch=args.batch, seq=args.seq)
    print(format_graph(graph, limit=args.lines))
    return 0


def _plan(args) -> int:
    from .training import plan_training

    plan = plan_training(
        args.model, devices=args.devices, hardware=args.hardware,
        global_batch=args.global_batch, seq=args.seq, top_k=args.top,
    )  # fmt: skip
    print(plan.to_json() if args.json else plan.report())
    return 0


def _report(args) -> int:
    """Drawn with plotly by the widgets package, which the core must not import: the command
    is found through the ``explorer.commands`` entry point that package declares."""
    from importlib.metadata import entry_points

    found = entry_points(group="explorer.commands", name="report")
    if not found:
        print("error: no 'report' command is installed; install the project with its notebook "
              "extra: `pip install -e '.[notebook]'`", file=sys.stderr)  # fmt: skip
        return 2
    try:
        run = next(iter(found)).load()
    except ImportError as e:
        print(f"error: the HTML report needs the notebook extra ({e.name or e} is missing); "
              "install it with `pip install -e '.[notebook]'`", file=sys.stderr)  # fmt: skip
        return 2
    return run(args)


def _list(args) -> int:
    names = models.names() if args.what == "models" else hardware.names()
    print(json.dumps(list(names)) if args.json else "\n".join(names))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m explorer", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for what in ("models", "hardware"):
        s = sub.add_parser(what, help=f"list the {what} catalog")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=_list, what=what)
    for name, func, help_ in (("summary", _summary, "parameters, FLOPs and node counts"),
                              ("ir", _ir, "the text IR of the forward graph")):  # fmt: skip
        s = sub.add_parser(name, help=help_)
        s.add_argument("model")
        s.add_argument("--batch", type=int, default=1)
        s.add_argument("--seq", type=int, default=None)
        if name == "summary":
            s.add_argument("--json", action="store_true")
        else:
            s.add_argument("--lines", type=int, default=40)
        s.set_defaults(func=func)
    s = sub.add_parser("plan", help="the fastest DP x TP x PP x ZeRO x recompute plan that fits")
    s.add_argument("model")
    s.add_argument("--devices", type=int, required=True)
    s.add_argument("--hardware", default="a100-80g")
    s.add_argument("--global-batch", type=int, required=True)
    s.add_argument("--seq", type=int, default=None)
    s.add_argument("--top", type=int, default=5, help="alternatives to show")
    s.add_argument("--json", action="store_true", help="write the TrainingPlan as JSON")
    s.set_defaults(func=_plan)
    s = sub.add_parser("report", help="one standalone HTML page: the plan and its figures")
    s.add_argument("model", help="a zoo name or a model JSON file")
    s.add_argument("--devices", type=int, required=True)
    s.add_argument("--hardware", default="a100-80g")
    s.add_argument("--global-batch", type=int, default=None, help="default: one per device")
    s.add_argument("--seq", type=int, default=None)
    s.add_argument("--layers", type=int, default=2, help="layers drawn in the graph")
    s.add_argument("-o", "--output", default="report.html")
    s.set_defaults(func=_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # our errors are ValueErrors that name the value and the fix
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
