"""The rank map against Megatron-Core's own group generation, and torchtitan's DeviceMesh
order against numpy's row-major reshape.

``_megatron_groups`` below is Megatron-Core's ``generate_masked_orthogonal_rank_groups`` and
``RankGenerator`` (NVIDIA/Megatron-LM, ``megatron/core/parallel_state.py`` at commit
00caa53af30912914981c86f39db123961678bbd), rewritten line for line without torch: the prefix
products, the ``decompose`` of the group index over the unmasked sizes and of the rank in the
group over the masked sizes, the inner products with the global strides; tokens left out of
the order are appended; the decoder generator has ``ep = 1`` and the expert generator
``cp = 1``, ``tp = expert tensor parallel size (= tp)``, ``dp = world / (tp * ep * pp)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.teach import GROUP_AXES, LAUNCHERS, RankLayout, TeachError, rank_map


# --- Megatron-Core, parallel_state.py @ 00caa53a -----------------------------------------------
def _generate_masked_orthogonal_rank_groups(world_size, parallel_size, mask):
    def prefix_product(a, init=1):
        r = [init]
        for v in a:
            init = init * v
            r.append(init)
        return r

    def inner_product(a, b):
        return sum(x * y for x, y in zip(a, b, strict=False))

    def decompose(index, shape, stride=None):
        if stride is None:
            stride = prefix_product(shape)
        idx = [(index // d) % s for s, d in zip(shape, stride, strict=False)]
        assert sum(x * y for x, y in zip(idx, stride[:-1], strict=False)) == index
        return idx

    masked_shape = [s for s, m in zip(parallel_size, mask, strict=True) if m]
    unmasked_shape = [s for s, m in zip(parallel_size, mask, strict=True) if not m]
    global_stride = prefix_product(parallel_size)
    masked_stride = [d for d, m in zip(global_stride, mask, strict=False) if m]
    unmasked_stride = [d for d, m in zip(global_stride, mask, strict=False) if not m]
    group_size = prefix_product(masked_shape)[-1]
    num_of_group = world_size // group_size
    ranks = []
    for group_index in range(num_of_group):
        decomposed_group_idx = decompose(group_index, unmasked_shape)
        rank = []
        for rank_in_group in range(group_size):
            decomposed_rank_idx = decompose(rank_in_group, masked_shape)
            rank.append(
                inner_product(decomposed_rank_idx, masked_stride)
                + inner_product(decomposed_group_idx, unmasked_stride)
            )
        ranks.append(rank)
    return ranks


class _RankGenerator:
    def __init__(self, tp, ep, dp, pp, cp, order):
        assert ep == 1 or cp == 1
        self.world_size = tp * dp * pp * cp * ep
        self.name_to_size = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "cp": cp}
        order = order.lower()
        for name in self.name_to_size:
            if name not in order and self.name_to_size[name] != 1:
                raise RuntimeError(f"{name} missing from {order}")
            elif name not in order:
                order = order + "-" + name
        self.order = order
        self.ordered_size = [self.name_to_size[t] for t in order.split("-")]

    def get_mask(self, order, token):
        ordered_token = order.split("-")
        mask = [False] * len(ordered_token)
        for t in token.split("-"):
            mask[ordered_token.index(t)] = True
        return mask

    def get_ranks(self, token):
        mask = self.get_mask(self.order, token)
        return _generate_masked_orthogonal_rank_groups(self.world_size, self.ordered_size, mask)


def _megatron_groups(lay: RankLayout, order: str) -> dict[str, list[list[int]]]:
    """initialize_model_parallel's groups for ``lay`` (expert tensor parallel = tp;
    ``num_distributed_optimizer_instances = lay.dp_replicate``)."""
    world = lay.world_size
    decoder = _RankGenerator(tp=lay.tp, ep=1, dp=lay.dp, pp=lay.pp, cp=lay.cp, order=order)
    expert_dp = world // (lay.tp * lay.ep * lay.pp)
    expert = _RankGenerator(tp=lay.tp, ep=lay.ep, dp=expert_dp, pp=lay.pp, cp=1, order=order)
    assert decoder.get_ranks("pp") == expert.get_ranks("pp")  # as Megatron-Core asserts
    # the intra-partial data-parallel groups of the distributed optimizer's instances
    instances = lay.dp_replicate
    assert (lay.dp * lay.cp) % instances == 0
    intra = (lay.dp * lay.cp) // instances
    partial = []
    for ranks_with_cp in decoder.get_ranks("dp-cp"):
        for i in range(instances):
            partial.append(ranks_with_cp[(i * intra) : ((i + 1) * intra)])
    return {
        "fsdp": partial,
        "tp": decoder.get_ranks("tp"), "cp": decoder.get_ranks("cp"),
        "dp": decoder.get_ranks("dp"), "pp": decoder.get_ranks("pp"),
        "dp-cp": decoder.get_ranks("dp-cp"), "ep": expert.get_ranks("ep"),
        "edp": expert.get_ranks("dp"),
    }  # fmt: skip


LAYOUTS = [
    RankLayout(dp=2, tp=2, pp=2),
    RankLayout(dp=4, tp=8, pp=4),
    RankLayout(dp=2, tp=4, pp=2, cp=2),
    RankLayout(dp=4, tp=2, pp=2, cp=2, ep=4),
    RankLayout(dp=8, tp=1, pp=1, ep=8),
    RankLayout(dp=3, tp=2, pp=5, cp=1, ep=3),
    RankLayout(dp=2, tp=8, pp=3, cp=4, ep=8),
    RankLayout(dp=4, tp=2, pp=2, cp=2, dp_replicate=2),
    RankLayout(dp=8, tp=2, pp=1, cp=1, ep=4, dp_replicate=4),
]
MEGATRON_AXES = ("tp", "cp", "ep", "dp", "pp", "dp-cp", "edp", "fsdp")


@pytest.mark.parametrize("lay", LAYOUTS, ids=str)
@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-dp", "cp-tp-dp-pp"])
def test_groups_equal_megatron_cores_rank_generator(lay, order):
    if "cp" not in order and lay.cp > 1 or "ep" not in order and lay.ep > 1:
        with pytest.raises(TeachError, match="leaves out"):
            rank_map(lay, order)
        return
    if lay.pp > 1 and not order.endswith("pp") and lay.ep != lay.cp:
        with pytest.raises(TeachError, match="Megatron-Core refuses"):
            rank_map(lay, order)
        return
    ours = rank_map(lay, order).groups
    theirs = _megatron_groups(lay, order)
    assert {a: [list(g) for g in ours[a]] for a in MEGATRON_AXES} == theirs


def test_the_docstring_example_of_megatron_core():
    """initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4 (so dp 2)."""
    m = rank_map(RankLayout(dp=2, tp=2, pp=4))
    g = m.groups
    assert g["dp"][:4] == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert g["tp"][-1] == (14, 15)
    assert g["pp"] == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))


@pytest.mark.parametrize("lay", LAYOUTS[:4], ids=str)
def test_torchtitan_mesh_is_row_major_over_pp_dp_cp_tp(lay):
    """torchtitan's DeviceMesh holds ranks row-major over [pp, dp, cp, tp]: the group of a dim
    is a line of the array along that dim."""
    m = rank_map(lay, "torchtitan")
    shape, names, mesh = m.device_mesh()
    sizes = {"pp": lay.pp, "dp_shard": lay.dp, "cp": lay.cp, "tp": lay.tp}
    assert shape == tuple(sizes[n] for n in names)
    assert list(names) == [n for n in ("pp", "dp_shard", "cp", "tp") if sizes[n] > 1]
    arr = np.asarray(mesh)
    assert arr.shape == shape and sorted(arr.ravel()) == list(range(lay.world_size))
    for k, name in enumerate(names):
        lines = np.moveaxis(arr, k, -1).reshape(-1, shape[k])
        axis = "dp" if name == "dp_shard" else name
        assert sorted(map(tuple, lines.tolist())) == sorted(m.groups[axis])


def test_nodes_spanned_and_rank_lists():
    m = rank_map(RankLayout(dp=2, tp=8, pp=2), gpus_per_node=8)
    assert m.nodes == 4
    assert all(len(s) == 1 for s in m.nodes_spanned("tp"))  # tp inside a node
    assert m.nodes_spanned("pp")[0] == (0, 2)
    assert m.new_group_ranks("dp")[0] == [0, 8]
    assert m.group_of(9, "tp") == tuple(range(8, 16))
    assert m.index_of(9, "dp") == 1
    assert "torch.distributed.new_group(ranks)" in m.code("dp-cp")
    text = str(m)
    assert "each inside one node" in text and "across up to 2 nodes" in text
    # tp larger than a node: its groups span two nodes
    wide = rank_map(RankLayout(dp=1, tp=16), gpus_per_node=8)
    assert wide.nodes_spanned("tp") == ((0, 1),)


def test_every_rank_is_in_exactly_one_group_of_each_axis():
    m = rank_map(LAYOUTS[3])
    for axis in GROUP_AXES:
        flat = sorted(r for g in m.groups[axis] for r in g)
        assert flat == list(range(m.world_size)), axis


def test_launchers_and_bad_values():
    assert set(LAUNCHERS) == {"megatron", "megatron-pp-before-dp", "torchtitan"}
    with pytest.raises(TeachError, match="does not divide"):
        RankLayout(dp=3, ep=2)
    with pytest.raises(TeachError, match="int >= 1"):
        RankLayout(dp=True)
    with pytest.raises(TeachError, match="tokens"):
        rank_map(RankLayout(dp=2), "tp-xx-dp")
    with pytest.raises(TeachError, match="tokens"):
        rank_map(RankLayout(dp=2), "tp-tp-dp")
    with pytest.raises(TeachError, match="gpus_per_node"):
        rank_map(RankLayout(dp=2), gpus_per_node=0)
    with pytest.raises(TeachError, match="rank"):
        rank_map(RankLayout(dp=2)).group_of(5, "dp")
    with pytest.raises(TeachError, match="group axis"):
        rank_map(RankLayout(dp=2)).describe("xp")
    assert isinstance(TeachError("x"), ex.ExplorerError)
    assert RankLayout(dp=np.int64(2)).dp == 2


def test_rank_nodes_exercise_counts_the_nodes_of_the_widest_group():
    from explorer.teach import kinds

    lay = RankLayout(dp=6, tp=8, pp=64)
    q = kinds.rank_nodes(lay, "pp")
    # pp ranks are dp * tp = 48 apart: every one on its own node of 8
    assert q.truth == 64.0
    assert q.check("1").mistake == "assumed the group sits inside one node"
    assert kinds.rank_nodes(lay, "tp").truth == 1.0
    assert (
        kinds.rank_nodes(RankLayout(dp=4, tp=2, pp=2), "dp", "megatron-pp-before-dp").truth == 2.0
    )


def test_a_map_larger_than_max_ranks_is_refused_with_the_limit():
    from explorer.teach.ranks import MAX_RANKS

    with pytest.raises(TeachError, match="MAX_RANKS"):
        RankLayout(dp=MAX_RANKS, tp=2)


@pytest.mark.parametrize("lay", [RankLayout(dp=4, tp=2, pp=2, cp=2, dp_replicate=2),
                                 RankLayout(dp=8, tp=4, dp_replicate=2)], ids=str)  # fmt: skip
def test_hsdp_groups_are_lines_of_torchtitans_mesh(lay):
    """torchtitan shards over the flattened (dp_shard, cp) dims of its mesh
    [pp, dp_replicate, dp_shard, cp, tp] and replicates along dp_replicate."""
    m = rank_map(lay, "torchtitan")
    shape, names, mesh = m.device_mesh()
    sizes = {"pp": lay.pp, "dp_replicate": lay.dp_replicate,
             "dp_shard": lay.dp // lay.dp_replicate, "cp": lay.cp, "tp": lay.tp}  # fmt: skip
    full = np.arange(lay.world_size).reshape([sizes[n] for n in sizes])
    assert np.asarray(mesh).ravel().tolist() == full.ravel().tolist()
    assert names == tuple(n for n in sizes if sizes[n] > 1)
    shard = np.moveaxis(full, (2, 3), (3, 4)).reshape(-1, sizes["dp_shard"] * lay.cp)
    assert sorted(map(tuple, shard.tolist())) == sorted(m.groups["fsdp"])
    rep = np.moveaxis(full, 1, -1).reshape(-1, lay.dp_replicate)
    assert sorted(map(tuple, rep.tolist())) == sorted(m.groups["replicate"])
    with pytest.raises(TeachError, match="dp_replicate=3 does not divide"):
        RankLayout(dp=4, dp_replicate=3)
