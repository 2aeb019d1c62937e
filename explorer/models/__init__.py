"""Model configs, the zoo in ``datasets/models`` and builders that turn a config into a Graph.

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("gpt2"), batch=2, seq=64)
>>> len(g.scopes(depth=2)) > 12
True
"""

from .builders import build
from .config import ModelConfig, ModelConfigError
from .hf import from_hf
from .torch_import import ImportReport, TorchImportError, TracedGraph, from_torch
from .zoo import datasets_dir, from_hf_config, load, load_file, names

__all__ = [
    "ModelConfig", "ModelConfigError", "build", "load", "load_file", "names",
    "from_hf_config", "datasets_dir", "from_torch", "from_hf", "TracedGraph", "ImportReport",
    "TorchImportError",
]  # fmt: skip
