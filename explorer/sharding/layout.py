"""`Layout`: how one tensor is split over a named mesh, and its printed notation.

A layout gives, per tensor dim, the mesh axes the dim is split over (major to minor), plus
the axes over which the value is a pending partial sum (each device holds one addend).

>>> from explorer.hardware import Mesh
>>> from explorer.ir import TensorType
>>> mesh = Mesh({"dp": 2, "tp": 4})
>>> lay = Layout((("dp",), (), ("tp",)))
>>> lay.format(TensorType((8, 16, 64), "bf16"), letters="bsh")
'bf16[B_dp, S, H_tp]'
>>> lay.local_shape((8, 16, 64), mesh)
(4, 16, 16)
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

from ..hardware import Mesh
from ..ir import TensorType
from .errors import ShardingError

__all__ = ["Layout", "format_axes"]

PartitionSpec = tuple[None | str | tuple[str, ...], ...]


def format_axes(axes: tuple[str, ...]) -> str:
    """``tp`` for one axis, ``{dp,tp}`` for several (the subscript of the notation)."""
    return axes[0] if len(axes) == 1 else "{" + ",".join(axes) + "}"


@dataclass(frozen=True)
class Layout:
    """Per-dim mesh axes (major to minor) and the axes of a pending partial sum.

    Construction checks what needs no mesh (an axis named twice); `validate` checks the
    rest against a tensor type and a mesh.

    Args:
        dims: one tuple of axis names per tensor dim (``()`` = not split).
        partial: sorted axes over which the value is a pending sum.
    """

    dims: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        dims = tuple(tuple(d) for d in self.dims)
        partial = tuple(sorted(self.partial))
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "partial", partial)
        used = [a for d in dims for a in d] + list(partial)
        for a in used:
            if not isinstance(a, str):
                raise ShardingError(f"layout {dims} names mesh axis {a!r}; axes are strings")
        dup = sorted({a for a in used if used.count(a) > 1})
        if dup:
            raise ShardingError(
                f"layout dims={dims} partial={partial} uses mesh axis {dup[0]!r} more than once; "
                "each axis may split one dim or mark a partial sum, not both or twice"
            )

    # --- constructors ---------------------------------------------------------------------
    @classmethod
    def replicated(cls, rank: int) -> Layout:
        """Every dim whole on every device.

        >>> Layout.replicated(2)
        Layout(dims=((), ()), partial=())
        """
        return cls(((),) * rank)

    @classmethod
    def from_partition_spec(cls, spec: PartitionSpec, partial: tuple[str, ...] = ()) -> Layout:
        """From a JAX-style spec: per dim ``None``, an axis name, or a tuple of names.

        >>> Layout.from_partition_spec(("dp", None, ("dp2", "tp"))).dims
        (('dp',), (), ('dp2', 'tp'))
        """
        dims = []
        for entry in spec:
            if entry is None:
                dims.append(())
            elif isinstance(entry, str):
                dims.append((entry,))
            else:
                dims.append(tuple(entry))
        return cls(tuple(dims), tuple(partial))

    @classmethod
    def from_mindspore(
        cls, device_matrix: tuple[int, ...], tensor_map: tuple, mesh: Mesh
    ) -> Layout:
        """From MindSpore's (device matrix, tensor map); map entries count device-matrix dims
        from the right, -1 = not split, a tuple = several axes (major to minor).

        >>> m = Mesh({"dp": 2, "tp": 4})
        >>> Layout.from_mindspore((2, 4), (1, -1, 0), m).dims
        (('dp',), (), ('tp',))
        """
        if tuple(device_matrix) != mesh.shape:
            raise ShardingError(
                f"device matrix {tuple(device_matrix)} differs from the mesh shape {mesh.shape}; "
                "build the mesh with the same axis sizes in the same order"
            )
        names = mesh.axis_names

        def axis(i: int) -> str:
            if not 0 <= i < len(names):
                raise ShardingError(
                    f"tensor map entry {i} is outside device matrix {tuple(device_matrix)}"
                )
            return names[len(names) - 1 - i]

        dims = []
        for entry in tensor_map:
            if isinstance(entry, tuple | list):
                dims.append(tuple(axis(i) for i in entry if i != -1))
            else:
                dims.append(() if entry == -1 else (axis(entry),))
        return cls(tuple(dims))

    # --- facts ----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def axes(self) -> tuple[str, ...]:
        """Every axis that splits a dim, dim by dim."""
        return tuple(a for d in self.dims for a in d)

    @property
    def is_replicated(self) -> bool:
        return not self.axes and not self.partial

    def shards(self, dim: int, mesh: Mesh) -> int:
        """How many pieces dim ``dim`` is cut into."""
        return math.prod(mesh.axis_size(a) for a in self.dims[dim])

    def local_shape(self, shape: tuple[int, ...], mesh: Mesh) -> tuple[int, ...]:
        """The block each device holds (assumes a validated layout)."""
        return tuple(d // self.shards(i, mesh) for i, d in enumerate(shape))

    def validate(self, ttype: TensorType, mesh: Mesh, tensor: str = "") -> Layout:
        """Raise `ShardingError` unless this layout fits ``ttype`` on ``mesh``; return self."""
        what = f"tensor %{tensor} " if tensor else "tensor "
        if len(self.dims) != ttype.rank:
            raise ShardingError(
                f"{what}{ttype} has rank {ttype.rank} but the layout gives {len(self.dims)} "
                f"dims {self.dims}; give one tuple of axes per dim"
            )
        shown = ""  # built only when a message needs it
        for a in self.axes + self.partial:
            if a not in mesh.axis_names:
                shown = f"{what}{ttype} with layout {self.format(ttype)}"
                raise ShardingError(
                    f"{shown}: unknown mesh axis {a!r}; the mesh has axes "
                    f"{', '.join(mesh.axis_names)}"
                )
        for i, (size, axes) in enumerate(zip(ttype.shape, self.dims, strict=True)):
            n = math.prod(mesh.axis_size(a) for a in axes)
            if size % n:
                shown = f"{what}{ttype} with layout {self.format(ttype)}"
                sizes = " x ".join(f"{a}={mesh.axis_size(a)}" for a in axes)
                raise ShardingError(
                    f"{shown}: dim {i} of size {size} is not divisible by the {n} shards of "
                    f"axes {sizes}; split that dim over fewer or smaller axes, or pad it to a "
                    f"multiple of {n}"
                )
        return self

    # --- printing and conversions ---------------------------------------------------------
    def format(
        self, ttype: TensorType | None = None, letters: str | None = None, mesh: Mesh | None = None
    ) -> str:
        """The notation ``bf16[B_dp, S, H_{dp,tp}]{U_tp}``.

        ``letters``: one letter per dim (signature letters; upper-cased); default A, B, C...
        """
        if mesh is not None and ttype is not None:
            self.validate(ttype, mesh)
        if letters is None:
            letters = string.ascii_uppercase[: self.rank]
        parts = []
        for c, axes in zip(letters, self.dims, strict=True):
            parts.append(c.upper() + ("_" + format_axes(axes) if axes else ""))
        dtype = ttype.dtype.value if ttype is not None else ""
        text = f"{dtype}[{', '.join(parts)}]"
        if self.partial:
            text += "{U_" + format_axes(self.partial) + "}"
        return text

    def __str__(self) -> str:
        return self.format()

    def to_partition_spec(self) -> PartitionSpec:
        """JAX style: per dim ``None``, one axis name, or a tuple of names.

        >>> Layout((("dp",), (), ("dp2", "tp"))).to_partition_spec()
        ('dp', None, ('dp2', 'tp'))
        """
        return tuple(None if not d else d[0] if len(d) == 1 else d for d in self.dims)

    def to_mindspore(self, mesh: Mesh) -> tuple[tuple[int, ...], tuple]:
        """(device matrix, tensor map) as in MindSpore's layout API.

        >>> Layout((("dp",), (), ("tp",))).to_mindspore(Mesh({"dp": 2, "tp": 4}))
        ((2, 4), (1, -1, 0))
        """
        names = mesh.axis_names

        def index(a: str) -> int:
            return len(names) - 1 - names.index(a)

        tmap: list = []
        for d in self.dims:
            if not d:
                tmap.append(-1)
            elif len(d) == 1:
                tmap.append(index(d[0]))
            else:
                tmap.append(tuple(index(a) for a in d))
        return mesh.shape, tuple(tmap)

    def split_counts(self, mesh: Mesh) -> tuple[int, ...]:
        """MindSpore ``shard()`` strategy: the number of pieces per dim.

        >>> Layout((("dp",), (), ("tp",))).split_counts(Mesh({"dp": 2, "tp": 4}))
        (2, 1, 4)
        """
        return tuple(self.shards(i, mesh) for i in range(self.rank))
