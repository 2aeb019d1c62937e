"""Bad arguments to ``ex.F`` ops get named errors, eager and under ``@jit``."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, JitSyntaxError
from explorer.compiler.errors import CompilerError, ShapeError


def x23():
    return ex.tensor(np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: F.softmax(x, axis=5),
        lambda x: F.softmax(x, axis=-3),
        lambda x: F.sum(x, axis=9),
        lambda x: x.mean(axis=2),
        lambda x: x.max(axis=(0, 7)),
        lambda x: F.transpose(x, (0, 4)),
    ],
)
def test_axis_out_of_range_names_axis_ndim_and_fix(call):
    with pytest.raises(ShapeError, match=r"axis.*ndim=2.*pass an axis in \[-2, 2\)"):
        call(x23())


def test_negative_axes_in_range_stay_valid():
    x = x23()
    np.testing.assert_allclose(F.sum(x, axis=-1).numpy(), [3.0, 12.0])
    np.testing.assert_allclose(x.mean(axis=-2).numpy(), [1.5, 2.5, 3.5])
    np.testing.assert_allclose(
        F.softmax(x, axis=-2).numpy(), F.softmax(x, axis=0).numpy(), rtol=1e-6
    )
    assert F.transpose(x, (-1, 0)).shape == (3, 2)


def test_repeated_axes_and_non_permutations_are_refused():
    with pytest.raises(ShapeError, match="names an axis twice"):
        F.sum(x23(), axis=(1, -1))
    with pytest.raises(ShapeError, match="not a permutation"):
        F.transpose(x23(), (1, 1))
    with pytest.raises(ShapeError, match=r"axis='0' is not an int"):
        F.sum(x23(), axis="0")


@pytest.mark.parametrize("bad", [-1, 2, 10**9])
def test_embedding_refuses_ids_outside_vocab(bad):
    table = x23()  # vocab 2
    with pytest.raises(ShapeError, match=rf"id {bad} is outside \[0, 2\)"):
        F.embedding(ex.tensor(np.array([0, bad])), table)
    np.testing.assert_allclose(F.embedding(ex.tensor(np.array([1])), table).numpy(), [[3, 4, 5]])


def test_embedding_refuses_float_ids():
    with pytest.raises(ShapeError, match="must be integers"):
        F.embedding(ex.tensor(np.array([0.0])), x23())


@pytest.mark.parametrize("p", [1.5, 1.0, -0.1, float("nan"), "0.5", True])
def test_dropout_p_must_be_in_0_1(p):
    with pytest.raises(ShapeError, match=r"dropout: p=.* must be a number in \[0, 1\)"):
        F.dropout(x23(), p=p)
    assert F.dropout(x23(), p=0.5).shape == (2, 3)


@pytest.mark.parametrize(
    "data, name", [(np.array([1j, 2j]), "complex128"), (np.array(["a", "b"]), "<U1"),
                   (np.array([object()]), "object")]
)  # fmt: skip
def test_unsupported_dtypes_are_named_not_labelled_fp32(data, name):
    with pytest.raises(ShapeError, match=f"numpy dtype {name}"):
        ex.tensor(data)
    with pytest.raises(ShapeError, match=f"numpy dtype {name}"):
        F.constant(data)


def test_boolean_mask_is_refused_eagerly_with_the_fix():
    x = x23()
    with pytest.raises(ShapeError, match=r"boolean-mask indexing.*depend on the data.*where"):
        x[x > 2]


def masked(x):
    return x[x > 2]


def test_boolean_mask_is_refused_under_jit_saying_why():
    with pytest.raises(JitSyntaxError, match=r"boolean-mask indexing.*depends on the data"):
        ex.jit(masked)(x23())


def test_where_is_the_suggested_rewrite_and_works():
    x = x23()
    np.testing.assert_allclose(F.where(x > 2, x, 0.0).numpy(), [[0, 0, 0], [3, 4, 5]])


def test_bad_indices_are_named_errors():
    x = x23()
    for index, says in [(5, r"index 5 is out of range"), ((0, 0, 0), "more entries"),
                        (1.5, "only ints"), ((..., ...), "one ...")]:  # fmt: skip
        with pytest.raises(CompilerError, match=says):
            x[index]
    assert x[-1, 1:].numpy().tolist() == [4.0, 5.0]


@pytest.mark.parametrize("bad", [-1, 3])
def test_cross_entropy_refuses_labels_outside_the_classes(bad):
    with pytest.raises(ShapeError, match=rf"label {bad} is outside \[0, 3\)"):
        F.cross_entropy(x23(), ex.tensor(np.array([bad, 0])))
    loss = F.cross_entropy(x23(), ex.tensor(np.array([2, 2]))).item()
    assert loss == pytest.approx(np.log(np.exp([0, 1, 2]).sum()) - 2, rel=1e-5)


@pytest.mark.parametrize("eps", [-1.0, 0.0, float("nan"), float("inf"), "1e-5"])
def test_norm_eps_must_be_finite_and_positive(eps):
    ones = ex.tensor(np.ones(3))
    with pytest.raises(ShapeError, match=r"layer_norm: eps=.* must be a finite number > 0"):
        F.layer_norm(x23(), ones, ones, eps=eps)
    with pytest.raises(ShapeError, match=r"rms_norm: eps=.* must be a finite number > 0"):
        F.rms_norm(x23(), ones, eps=eps)


def test_complex_python_scalars_are_refused():
    with pytest.raises(ShapeError, match=r"1j is a complex"):
        x23() + 1j


def norm_of_ints(x):
    return F.layer_norm(x, x, x)


def test_norm_of_an_int_tensor_is_refused_under_jit_too():
    # found by the fuzz: under @jit it ended in numpy's UFuncTypeError inside the kernel
    with pytest.raises(ShapeError, match=r"layer_norm: got int64\[4\]; it needs float"):
        ex.jit(norm_of_ints)(ex.tensor(np.arange(4)))


@pytest.mark.parametrize(
    "make, says",
    [(lambda: ex.nn.Linear(0, 3), "size 0"), (lambda: ex.nn.Embedding(-1, 4), "size -1"),
     (lambda: ex.nn.LayerNorm(2.5), "size 2.5"),
     (lambda: ex.nn.Linear(10**6, 10**6), "MAX_PARAMETER_SIZE"),
     (lambda: ex.nn.Attention(8, 4, num_kv_heads=3), "must divide")],
)  # fmt: skip
def test_cells_refuse_bad_sizes_before_allocating(make, says):
    with pytest.raises(ShapeError, match=says):
        make()
    assert ex.nn.Linear(4, 3)(ex.tensor(np.ones((2, 4)))).shape == (2, 3)


TABLE = ex.tensor(np.arange(6.0).reshape(2, 3))


def look_up(ids):
    return F.embedding(ids, TABLE)


def test_a_compiled_embedding_checks_the_ids_of_every_call():
    f = ex.jit(look_up)
    np.testing.assert_allclose(f(ex.tensor(np.array([1, 0]))).numpy(), [[3, 4, 5], [0, 1, 2]])
    with pytest.raises(ShapeError, match=r"id -1 is outside \[0, 2\)"):
        f(ex.tensor(np.array([0, -1])))  # same shapes: the compiled graph runs, no recapture


def test_iterating_a_tensor_still_stops_at_its_length():
    from explorer.compiler.errors import TensorIndexError

    assert [r.numpy().tolist() for r in x23()] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TensorIndexError) as info:
        x23()[2]
    assert isinstance(info.value, IndexError) and isinstance(info.value, ex.ExplorerError)
