"""The tensor framework: eager execution and ``@jit`` on numpy, sharing ``explorer.ir``.

>>> import explorer as ex, numpy as np
>>> @ex.jit
... def step(x, w):
...     return ex.F.gelu(x @ w + 1.0)
>>> step(ex.tensor(np.ones((2, 3))), ex.tensor(np.ones((3, 4)))).shape
(2, 4)
"""

from . import functional as F
from . import nn
from .autodiff import grad, value_and_grad
from .errors import CompilerError, GraphBreak, JitSyntaxError, ShapeError
from .executor import Program
from .jit import JitFunction, capture, jit
from .passes import MemoryPlan, RewriteStep, optimize
from .rewrite_diff import NodeStatus, RewriteDiff, rewrite_diff
from .tensor import Parameter, Tensor, spec, tensor
from .torch_decode import Decoder

__all__ = [
    "F", "nn", "jit", "JitFunction", "capture", "grad", "value_and_grad", "Tensor", "Parameter",
    "tensor", "spec", "Program", "optimize", "RewriteStep", "MemoryPlan", "CompilerError",
    "JitSyntaxError", "ShapeError", "GraphBreak", "RewriteDiff", "rewrite_diff", "NodeStatus",
    "Decoder",
]  # fmt: skip
