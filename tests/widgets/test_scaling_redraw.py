"""ScalingView redraws without building a figure (`figures.scaling.scaling_traces`): after
any change the widget holds what a freshly built figure would."""

from widgets import ScalingView
from widgets.scaling_view import Series


def _same_as_built(v: ScalingView) -> None:
    held, built = v.figure.to_dict(), v._build().to_dict()
    for trace in held["data"]:
        trace.pop("uid", None)  # the widget's trace ids
    assert held["data"] == built["data"]
    for key in ("xaxis", "xaxis2", "annotations", "title"):
        assert held["layout"][key] == built["layout"][key], key


def test_a_redraw_holds_the_freshly_built_figure():
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    _same_as_built(v)
    v.controls["metric"].value = "mfu"  # the left panel's title and y
    _same_as_built(v)
    assert v.figure.layout.annotations[0].text == "MFU"
    v.add_series(Series("gpt2", "a100-80g", "strong", 64, 512, (8, 16, 32)))  # wider x
    _same_as_built(v)
    assert list(v.figure.data[-1].x) == [8, 32] and list(v.figure.layout.xaxis.tickvals) == [
        8, 16, 32,
    ]  # fmt: skip
    v.clear()
    _same_as_built(v)
