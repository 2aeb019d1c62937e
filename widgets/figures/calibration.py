"""``calibration_figure``: a `Calibration` drawn as measured vs predicted (before and after
the fit), the residual of every run, and the ranking of the measured layouts.

Three panels, with a fixed set of traces whatever the calibration holds, so a view
updates traces and never adds one (added traces are lost when a page reconnects):

- top, full width: predicted / measured - 1 per run, before and after (fit rows, then
  check rows; every label says which);
- bottom left: predicted vs measured step time (log-log), hollow before the fit, filled
  after; circles are fit rows, diamonds check rows; the diagonal and a +-10% band;
- bottom right: the runs ranked by measured throughput (tokens/s per device, 1 =
  fastest) against their rank by the fitted prediction; on the diagonal the model orders
  the layouts as they measured.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.training import Calibration

from .style import base_layout, wrap_title

__all__ = ["calibration_figure", "calibration_arrays", "ranks", "TRACES"]

# trace index by name (the view and the tests address traces by these)
TRACES = (
    "fit before", "fit after", "check before", "check after", "diagonal", "+10%", "-10%",
    "error before", "error after", "rank fit", "rank check", "rank diagonal",
)  # fmt: skip
BEFORE, AFTER = "#9AA0A6", "#1F77B4"


def _swatch(color: str) -> str:
    return f"<span style='color:{color}'>■</span>"


CHECK = "#E377C2"


def ranks(values) -> list[int]:
    """1-based ranks, highest value first (ties keep their order)."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0] * len(values)
    for r, i in enumerate(order):
        out[i] = r + 1
    return out


def calibration_arrays(cal: Calibration) -> dict[str, object]:
    """Per-run columns in table order: labels, roles, times, errors, throughput ranks."""
    rows = cal.table
    labels = [r.run.label for r in rows]
    tput = lambda r, t: r.run.global_batch * r.run.seq / t / r.run.config.devices  # noqa: E731
    meas = [tput(r, r.measured_s) for r in rows]
    pred = [tput(r, r.after_s) for r in rows]
    return {
        "labels": labels, "roles": [r.role for r in rows],
        "measured": [r.measured_s for r in rows], "before": [r.before_s for r in rows],
        "after": [r.after_s for r in rows],
        "error_before": [r.error_before for r in rows],
        "error_after": [r.error_after for r in rows],
        "rank_measured": ranks(meas), "rank_predicted": ranks(pred),
    }  # fmt: skip


def _pick(values, roles, role):
    return [v for v, r in zip(values, roles, strict=True) if r == role]


def calibration_figure(cal: Calibration | None, title: str = "") -> go.Figure:
    """The three panels for ``cal`` (None: empty axes with every trace in place).

    >>> import explorer as ex
    >>> runs = [ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=d, tp=8 // d), "a100-80g", 32,
    ...                        512, t) for d, t in ((8, 0.05), (4, 0.055))]
    >>> fig = calibration_figure(ex.calibrate(runs, fit=("hbm_efficiency",), loo=False))
    >>> len(fig.data) == len(TRACES), fig.data[TRACES.index("fit after")].x[0]
    (True, 0.05)
    """
    fig = make_subplots(
        rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]], row_heights=[0.4, 0.6],
        vertical_spacing=0.3, horizontal_spacing=0.1,
        subplot_titles=(f"error: predicted / measured - 1 ({_swatch(BEFORE)} before the fit, "
                        f"{_swatch(AFTER)} after; the legend below names every mark)",
                        "predicted vs measured step (s)",
                        "rank by tokens/s per device"),
    )  # fmt: skip
    SCATTER, BARS, RANKS = {"row": 2, "col": 1}, {"row": 1, "col": 1}, {"row": 2, "col": 2}
    a = calibration_arrays(cal) if cal is not None else None
    get = (lambda k: a[k]) if a else (lambda k: [])  # noqa: E731
    roles = get("roles")
    labels = get("labels")
    for role, symbol in (("fit", "circle"), ("check", "diamond")):
        lab = _pick(labels, roles, role)
        x = _pick(get("measured"), roles, role)
        for when, color, fill in (("before", BEFORE, "open"), ("after", AFTER, "")):
            y = _pick(get(when), roles, role)
            sym = f"{symbol}-{fill}" if fill else symbol
            fig.add_trace(
                go.Scatter(
                    x=x, y=y, mode="markers", name=f"{role} rows, {when} the fit",
                    text=lab, marker={"symbol": sym, "size": 9, "color": color,
                                      "line": {"color": CHECK if role == "check" else color,
                                               "width": 1.5}},
                    hovertemplate="%{text}<br>measured %{x:.4g} s<br>predicted %{y:.4g} s"
                    "<extra>%{fullData.name}</extra>", legendgroup=f"{role}{when}",
                ), **SCATTER,
            )  # fmt: skip
    every = [v for k in ("measured", "before", "after") for v in get(k)]
    lo, hi = (min(every) / 1.3, max(every) * 1.3) if every else (0.1, 10.0)
    for name, f, dash in (("diagonal", 1.0, "solid"), ("+10%", 1.1, "dot"),
                          ("-10%", 0.9, "dot")):  # fmt: skip
        fig.add_trace(
            go.Scatter(x=[lo, hi], y=[lo * f, hi * f], mode="lines", name=name,
                       line={"color": "#888", "dash": dash, "width": 1}, hoverinfo="skip",
                       showlegend=name != "-10%", legendgroup="band"),
            **SCATTER,
        )  # fmt: skip
    ticks = [
        f"{lab} ({'fit' if r == 'fit' else 'check'})" for lab, r in zip(labels, roles, strict=True)
    ]
    for when, color in (("before", BEFORE), ("after", AFTER)):
        fig.add_trace(
            go.Bar(x=ticks, y=get(f"error_{when}"), name=f"error {when} the fit",
                   marker={"color": color}, showlegend=False,
                   hovertemplate="%{x}<br>%{y:+.1%}<extra>" + when + " the fit</extra>"),
            **BARS,
        )  # fmt: skip
    for role, color in (("fit", AFTER), ("check", CHECK)):
        fig.add_trace(
            go.Scatter(
                x=_pick(get("rank_measured"), roles, role),
                y=_pick(get("rank_predicted"), roles, role), mode="markers",
                name=f"{role} rows, rank", text=_pick(labels, roles, role), showlegend=False,
                marker={"size": 10, "color": color,
                        "symbol": "circle" if role == "fit" else "diamond"},
                hovertemplate="%{text}<br>measured rank %{x}<br>predicted rank %{y}"
                "<extra></extra>",
            ), **RANKS,
        )  # fmt: skip
    n = len(labels) or 1
    fig.add_trace(
        go.Scatter(x=[1, n], y=[1, n], mode="lines", name="same order",
                   line={"color": "#888", "dash": "dot", "width": 1}, hoverinfo="skip",
                   showlegend=False),
        **RANKS,
    )  # fmt: skip
    fig.update_xaxes(type="log", title_text="measured s", range=np.log10([lo, hi]), **SCATTER)
    fig.update_yaxes(type="log", title_text="predicted s", range=np.log10([lo, hi]), **SCATTER)
    fig.update_yaxes(tickformat="+.0%", zeroline=True, **BARS)
    fig.update_xaxes(tickangle=-30, tickfont={"size": 10}, **BARS)
    fig.update_xaxes(title_text="measured rank", dtick=1, range=[0.5, n + 0.5], **RANKS)
    fig.update_yaxes(title_text="predicted rank", dtick=1, range=[n + 0.5, 0.5], **RANKS)
    head = title or _title(cal)
    lines = wrap_title(head).count("<br>") + 2
    fig.update_layout(base_layout(head, height=820, legend=False, title_lines=lines))
    fig.update_layout(
        barmode="group", plot_bgcolor="white", showlegend=True,
        legend={"orientation": "h", "x": 0, "y": -0.12, "yanchor": "top", "xanchor": "left",
                "font": {"size": 11}},
        margin={"b": 110},
    )  # fmt: skip
    return fig


def _title(cal: Calibration | None) -> str:
    if cal is None:
        return "calibration: no runs fitted yet"
    fit, check = len(cal.rows("fit")), len(cal.rows("check"))
    med = cal.median_error("fit")
    parts = [f"calibration on {fit} fit rows ({check} check rows)",
             f"median |error| of fit rows {cal.median_error('fit', 'before'):.1%} -> {med:.1%}"]  # fmt: skip
    if check:
        parts.append(
            f"check rows {cal.median_error('check', 'before'):.1%} -> "
            f"{cal.median_error('check'):.1%}"
        )
    if cal.loo_error is not None:
        parts.append(f"leave-one-out {cal.loo_error:.1%}")
    return ", ".join(parts)
