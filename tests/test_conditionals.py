"""Per-sample conditionals (`@pipeline_def(enable_conditionals=True)`): `if`/`elif`/`else`,
`and`/`or`/`not` and `if` expressions on DataNodes, against NumPy references computed
sample by sample and against DALI on the same pipelines where DALI is installed."""
import numpy as np
import pytest

import torchdali
from torchdali import do_not_convert, fn, pipeline_def, types
from torchdali.sample_data import write_sample_dataset

from conftest import (as_numpy_batch, constant_source, dali_or_skip, fork_or_skip, requires_cuda,
                      rerun_without_cuda)

COND = [True, False, True, True, False, False, True]
X = [np.int32(v) for v in (1, 2, 3, 4, 5, 6, 7)]
N = len(COND)


def run(lib, body, *feeds, device_id=None, image_layout="HWC", **kwargs):
    """One iteration of `body(fn, types, *nodes)` in a conditional pipeline of `lib`
    (torchdali or DALI); `feeds` are per-sample lists given through external_source
    (3D samples with `image_layout`)."""
    @lib.pipeline_def(enable_conditionals=True, batch_size=len(feeds[0]), num_threads=1,
                      device_id=device_id, seed=7, **kwargs)
    def pipe():
        nodes = [lib.fn.external_source(constant_source([np.asarray(v) for v in feed]),
                                        layout=image_layout if np.ndim(feed[0]) == 3 else "")
                 for feed in feeds]
        return body(lib.fn, lib.types, *nodes)

    outs = pipe().run()
    return [as_numpy_batch(o) for o in outs]


# --- pipeline bodies, shared by torchdali and DALI (module-level functions the definition
# calls, so both libraries convert them at the call) ---

def nested(fn, types, c, x):
    if c:
        if x > 3:
            y = x * 10
        else:
            y = x + 100
    elif x == 2:
        y = x - 1
    else:
        y = x
    return y


def logical(fn, types, c, x):
    big = x > 4
    return c and big, c or big, not c, not x, (c and not big) or x == 5


def numeric_condition(fn, types, c, x):
    if c:
        out = x + 1
    else:
        out = x - 1
    return out


def shapes(fn, types, c, img):
    if c:
        out = fn.crop(img, crop=(2, 3))
        kind = 1
    else:
        out = fn.crop(img, crop=(4, 2))
        kind = 2
    return out, kind


def pass_through_and_locals(fn, types, c, x):
    y = x * 2
    if c:
        tmp = x + 1
        y = tmp * tmp
    return y


def returns_in_branches(fn, types, c, x):
    if c:
        return x + 1, x
    return x - 1, x


def argument_inputs(fn, types, c, img, pos):
    if c:
        out = fn.crop(img, crop=(2, 2), crop_pos_x=pos, crop_pos_y=pos)
    else:
        out = fn.crop(img, crop=(2, 2))
    return out


def if_expression(fn, types, c, x):
    return x + 1 if c else x * 3


def images(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (int(rng.integers(4, 9)), int(rng.integers(4, 9)), 3), dtype=np.uint8)
            for _ in range(n)]


CASES = {
    "nested": (nested, [COND, X]),
    "logical": (logical, [COND, X]),
    "float_condition": (numeric_condition, [[np.float32(v) for v in (1.5, 0, -2, 0, 0.1, 0, 3)], X]),
    "uint8_condition": (numeric_condition, [[np.uint8(v) for v in (0, 1, 255, 0, 0, 2, 0)], X]),
    "shapes": (shapes, [COND, images(N)]),
    "pass_through_and_locals": (pass_through_and_locals, [COND, X]),
    "returns_in_branches": (returns_in_branches, [COND, X]),
    "argument_inputs": (argument_inputs, [COND, images(N, 1), [np.float32(v) for v in np.linspace(0, 1, N)]]),
    "if_expression": (if_expression, [COND, X]),
    "all_true": (nested, [[True] * N, X]),
    "all_false": (nested, [[False] * N, X]),
    "shapes_all_true": (shapes, [[True] * N, images(N)]),
    "shapes_all_false": (shapes, [[False] * N, images(N)]),
}


def reference(name, feeds):
    """The same bodies run sample by sample on NumPy values (plain Python semantics)."""
    class NumpyFn:
        @staticmethod
        def crop(img, crop, crop_pos_x=0.5, crop_pos_y=0.5):
            h, w = img.shape[:2]
            y0 = int(np.floor(crop_pos_y * (h - crop[0]) + 0.5))
            x0 = int(np.floor(crop_pos_x * (w - crop[1]) + 0.5))
            return img[y0:y0 + crop[0], x0:x0 + crop[1]]

    body = CASES[name][0]
    per_sample = [body(NumpyFn, None, *(np.asarray(f[i]) for f in feeds)) for i in range(len(feeds[0]))]
    per_sample = [r if isinstance(r, tuple) else (r,) for r in per_sample]
    return [[np.asarray(s[k]) for s in per_sample] for k in range(len(per_sample[0]))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_per_sample_python(name):
    body, feeds = CASES[name]
    got = run(torchdali, body, *feeds)
    expected = reference(name, feeds)
    assert len(got) == len(expected)
    for out, exp in zip(got, expected):
        assert len(out) == len(exp)
        for i, (g, e) in enumerate(zip(out, exp)):
            assert g.shape == e.shape, f"sample {i}"
            np.testing.assert_array_equal(g, e.astype(g.dtype), err_msg=f"sample {i}")


@pytest.mark.parametrize("name", sorted(set(CASES) - {"if_expression"}))  # DALI: no `if` expressions on DataNodes
def test_matches_dali(name):
    dali = dali_or_skip()
    body, feeds = CASES[name]
    got = run(torchdali, body, *feeds)
    expected = run(dali, body, *feeds)
    assert len(got) == len(expected) and all(len(g) == len(e) for g, e in zip(got, expected))
    for k, (out, exp) in enumerate(zip(got, expected)):
        for i, (g, e) in enumerate(zip(out, exp)):
            assert (g.shape, g.dtype) == (e.shape, e.dtype), f"output {k} sample {i}"
            np.testing.assert_array_equal(g, e, err_msg=f"output {k} sample {i}")


def test_short_circuit_evaluates_right_operand_only_where_needed():
    seen = []

    def record(samples):
        seen.append(len(samples))
        return samples

    def body(fn, types, c, x):
        rhs = lambda: fn.python_function(x > 3, function=record, batch_processing=True)  # noqa: E731
        return c and rhs(), c or rhs()

    and_out, or_out = run(torchdali, body, COND, X, exec_async=False, exec_pipelined=False)
    assert sorted(seen) == sorted([sum(COND), N - sum(COND)])  # `and` where c is true, `or` where false
    big = [v > 3 for v in X]
    assert [bool(v) for v in and_out] == [c and b for c, b in zip(COND, big)]
    assert [bool(v) for v in or_out] == [c or b for c, b in zip(COND, big)]


def test_python_conditions_stay_python():
    @pipeline_def(enable_conditionals=True, batch_size=2, num_threads=1, device_id=None)
    def pipe(double):
        x = fn.external_source(constant_source([np.int32(3), np.int32(4)]))
        if double and x is not None:
            x = x * 2
        out = [x + k if k % 2 else x for k in range(3)]
        return out[2] if not double else out[1]

    assert [int(v) for v in pipe(True).run()[0].as_array()] == [7, 9]
    assert [int(v) for v in pipe(False).run()[0].as_array()] == [3, 4]


def helper_with_if(c, x):
    if c:
        return x + 1000
    return x


@do_not_convert
def helper_not_converted(c, x):
    if c:
        return x + 1000
    return x


class Augment:
    def apply(self, c, x):
        return x * -1 if c else x

    def __call__(self, c, x):
        if c:
            x = x * 3
        return x


def calls_helpers(fn, types, c, x):
    return helper_with_if(c, x), Augment().apply(c, x), Augment()(c, x)


def calls_unconverted(fn, types, c, x):
    return helper_not_converted(c, x)


def test_called_functions_are_converted_unless_do_not_convert():
    out = run(torchdali, calls_helpers, COND, X)
    assert [int(v) for v in out[0]] == [int(x) + 1000 * c for c, x in zip(COND, X)]
    assert [int(v) for v in out[1]] == [-int(x) if c else int(x) for c, x in zip(COND, X)]
    assert [int(v) for v in out[2]] == [3 * int(x) if c else int(x) for c, x in zip(COND, X)]
    with pytest.raises(TypeError, match="do_not_convert"):
        run(torchdali, calls_unconverted, COND, X)


def structures_loops_and_inner_functions(fn, types, c, x):
    def bump(v):
        if c:
            return v + 100
        return v

    for _ in range(2):
        if c:
            d = {"a": x, "b": (x + 1, 5)}
        else:
            d = {"a": x * 0, "b": (x, 6)}
        x = bump(d["a"])
    return x, d["b"][0], d["b"][1]


def test_structures_loops_and_inner_functions():
    x, b0, b1 = run(torchdali, structures_loops_and_inner_functions, COND, X)
    for c, v, gx, g0, g1 in zip(COND, X, x, b0, b1):
        assert (int(gx), int(g0), int(g1)) == ((int(v) + 200, int(v) + 101, 5) if c else (0, 0, 6))


def keeps_a_branch_value_in_a_list(fn, types, c, x):
    kept = []
    if c:
        kept.append(x + 1)
    return kept[0]


def test_value_leaking_out_of_a_branch_is_an_error():
    with pytest.raises(ValueError, match="computed inside a per-sample `if` branch and never merged"):
        run(torchdali, keeps_a_branch_value_in_a_list, COND, X)


def test_branches_of_different_shapes_give_a_ragged_batch():
    (out, kind) = run(torchdali, shapes, COND, images(N))
    for c, o, k, img in zip(COND, out, kind, images(N)):
        assert o.shape == ((2, 3, 3) if c else (4, 2, 3))
        assert int(k) == (1 if c else 2)


def random_in_branches(fn, types, c, x):
    everyone = fn.random.uniform(range=(0, 1), seed=5)
    if c:
        r = fn.random.uniform(range=(0, 1), seed=5)
        s = fn.random.normal(x, seed=9)
    else:
        r = fn.random.uniform(range=(5, 6))
        s = fn.cast(x, dtype=types.FLOAT) * 0.0
    return everyone, r, s, fn.random.normal(x, seed=9)


@pytest.mark.parametrize("lib_name", ["torchdali", "dali"])
def test_random_operators_in_branches(lib_name):
    """An operator without inputs inside a branch runs on the whole batch and the branch
    takes its samples' values; one with inputs draws for the branch's samples only, in
    order (checked on DALI too: the numbers differ, the pattern is the same)."""
    lib = torchdali if lib_name == "torchdali" else dali_or_skip()
    everyone, r, s, whole = run(lib, random_in_branches, COND, X)
    for c, e, v in zip(COND, everyone, r):
        assert (v == e) if c else (5 <= v < 6)
    drawn = [float(v) for c, v in zip(COND, s) if c]
    np.testing.assert_allclose(drawn, [float(v) for v in whole[:len(drawn)]], rtol=1e-6)


@pytest.fixture(scope="module")
def images_dir(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("cond_images")), num_images=32, num_classes=2,
                                min_size=48, max_size=64)


def rotate_pipeline(images_dir, decode_device):
    """Seed 001's example (random rotation with a 25% chance), also returning the coin
    and the unrotated images."""
    @pipeline_def(enable_conditionals=True)
    def random_rotate():
        jpegs, _ = fn.readers.file(device="cpu", file_root=images_dir)
        images = fn.decoders.image(jpegs, device=decode_device)
        do_rotate = fn.random.coin_flip(probability=0.25, dtype=types.DALIDataType.BOOL)
        if do_rotate:
            result = fn.rotate(images, angle=fn.random.uniform(range=(10, 30)), fill_value=0)
        else:
            result = images
        return result, images, do_rotate

    return random_rotate


def check_rotated_exactly_where_the_coin_says(pipe, iterations=4):
    flips = []
    for _ in range(iterations):
        result, images, coin = (as_numpy_batch(o) for o in pipe.run())
        for r, im, c in zip(result, images, coin):
            flips.append(bool(c))
            if c:
                assert r.shape != im.shape or not np.array_equal(r, im)
            else:
                np.testing.assert_array_equal(r, im)
    assert 0 < sum(flips) < len(flips) / 2  # about 25% of 32 samples


def test_seed_random_rotate_example(images_dir):
    make = rotate_pipeline(images_dir, "cpu")
    check_rotated_exactly_where_the_coin_says(make(batch_size=8, num_threads=2, device_id=None, seed=12))
    first, second = ([as_numpy_batch(o) for o in make(batch_size=8, num_threads=2, device_id=None,
                                                       seed=12).run()] for _ in range(2))
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def rotate_where(fn, types, c, img, angle):
    if c:
        out = fn.rotate(img, angle=angle, fill_value=0)
    else:
        out = img
    return out


def rotate_all(fn, types, img, angle):
    return fn.rotate(img, angle=angle, fill_value=0)


def test_rotation_in_branch_equals_plain_rotation_with_the_same_angles():
    imgs = images(6, 3)
    coin = [True, False, False, True, True, False]
    angles = [np.float32(a) for a in (12, 20, 25, 17, 29, 11)]
    got = run(torchdali, rotate_where, coin, imgs, angles)[0]
    plain = run(torchdali, rotate_all, imgs, angles)[0]
    for c, g, p, im in zip(coin, got, plain, imgs):
        np.testing.assert_array_equal(g, p if c else im)


@requires_cuda
def test_seed_random_rotate_example_gpu(images_dir):
    pipe = rotate_pipeline(images_dir, "mixed")(batch_size=8, num_threads=2, device_id=0, seed=12)
    check_rotated_exactly_where_the_coin_says(pipe)


@requires_cuda
@pytest.mark.parametrize("name", ["shapes", "shapes_all_true", "shapes_all_false", "argument_inputs",
                                  "pass_through_and_locals", "if_expression"])
def test_gpu_branches_match_cpu(name):
    """The same pipelines with the data (not the conditions) on the GPU."""
    body, feeds = CASES[name]

    def on_gpu(fn, types, c, x, *rest):
        return body(fn, types, c, x.gpu(), *rest)

    cpu = run(torchdali, body, *feeds)
    gpu = run(torchdali, on_gpu, *feeds, device_id=0)
    for out_c, out_g in zip(cpu, gpu):
        for c, g in zip(out_c, out_g):
            np.testing.assert_array_equal(c, g)


# --- seed 001: do_not_convert and external_source callbacks ---

def source_fun(sample_info):
    return np.full((2, 2), sample_info.iter_idx)


def test_seed_external_source_callback_defined_outside_is_not_converted():
    @pipeline_def(enable_conditionals=True, batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source=source_fun, batch=False)

    p = pipe()
    assert p.definition.outputs[0].source.args["source"] is source_fun
    out = p.run()[0]
    assert out.as_array().shape == (3, 2, 2)


@do_not_convert
def source_factory(size):
    def source_fun(sample_info):
        return np.full(size, sample_info.iter_idx)
    return source_fun


@pytest.mark.parametrize("factory_outside", [True, False])
def test_seed_parallel_source_factory(factory_outside):
    from torchdali.conditionals.transform import _converted_code

    fork_or_skip()
    @pipeline_def(enable_conditionals=True, batch_size=2, num_threads=1, device_id=None, py_num_workers=1)
    def pipe_inside():
        def source_factory(size):
            def source_fun(sample_info):
                return np.full(size, sample_info.iter_idx)
            return source_fun

        source = source_factory(size=(2, 1))
        return fn.external_source(source=source, parallel=True, batch=False)

    @pipeline_def(enable_conditionals=True, batch_size=2, num_threads=1, device_id=None, py_num_workers=1)
    def pipe_outside():
        source = source_factory(size=(2, 1))
        return fn.external_source(source=source, parallel=True, batch=False)

    p = pipe_outside() if factory_outside else pipe_inside()
    callback = p.definition.outputs[0].source.args["source"]
    assert (callback.__code__ in _converted_code) != factory_outside
    for iteration in range(2):
        out = p.run()[0].as_array()
        np.testing.assert_array_equal(out, np.full((2, 2, 1), iteration))


def test_fork_tests_in_a_process_without_cuda():
    rerun_without_cuda(__file__, "-k", "parallel_source_factory or docs_examples_run")


# --- errors ---

def if_else(fn, types, c, x):
    if c:
        y = x + 1
    else:
        y = x
    return y


def if_only(fn, types, c, x):
    if c:
        y = x + 1
    return y


def while_c(fn, types, c, x):
    while c:
        x = x + 1
    return x


@pytest.mark.parametrize("body, cond, error, match", [
    (if_else, [np.array([v]) for v in COND], ValueError, r"condition `c` must be a scalar .* shape \(1,\)"),
    (if_only, COND, ValueError, "variable 'y' is assigned in one branch only .* `else` branch"),
    (while_c, COND, TypeError, "no truth value outside a per-sample `if`"),
], ids=["non-scalar condition", "assigned in one branch", "while"])
def test_errors_name_the_problem(body, cond, error, match):
    with pytest.raises(error, match=match):
        run(torchdali, body, cond, X)


def x_and_c(fn, types, c, x):
    return x and c


def c_or_x(fn, types, c, x):
    return c or x


@pytest.mark.parametrize("body, side, expression", [(x_and_c, "left", "and"), (c_or_x, "right", "or")])
def test_and_or_need_bool_operands(body, side, expression):
    with pytest.raises(TypeError, match=f"{side} operand of `{expression}` must be a bool scalar"):
        run(torchdali, body, COND, X)


def negate(fn, types, c, x):
    return not x


def test_not_accepts_numbers():
    out = run(torchdali, negate, COND, [np.float32(v) for v in (0, 1, -1, 0, 2, 0, 0)])
    assert [bool(v) for v in out[0]] == [True, False, False, True, False, True, True]


def test_datanode_as_bool_outside_conditional_mode():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(constant_source([np.int32(1), np.int32(2)]))
        if x > 1:
            x = x + 1
        return x

    with pytest.raises(TypeError, match="enable_conditionals=True"):
        pipe()


def test_branches_must_agree_on_type():
    def body(fn, types, c, x):
        if c:
            y = x
        else:
            y = fn.cast(x, dtype=types.FLOAT)
        return y

    with pytest.raises(TypeError, match="variable 'y' differs between the branches of `if c` .*int32 vs float32"):
        run(torchdali, body, COND, X)
    run(torchdali, body, [True] * N, X)  # an empty branch has nothing to disagree with


def sliced_or_cropped(fn, types, c, img):
    if c:
        out = fn.crop(img, crop=(2, 3))  # layout HWC
    else:
        out = img[1:]  # no layout
    return out


def test_branches_must_agree_on_layout():
    with pytest.raises(TypeError, match="variable 'out' differs .*layout 'HWC' vs ''"):
        run(torchdali, sliced_or_cropped, COND, images(N), image_layout="")


def test_branches_must_agree_on_device():
    @pipeline_def(enable_conditionals=True, batch_size=2, num_threads=1, device_id=0)
    def pipe():
        c = fn.external_source(constant_source([np.bool_(True), np.bool_(False)]))
        x = fn.external_source(constant_source([np.int32(1), np.int32(2)]))
        if c:
            y = x.gpu()
        else:
            y = x
        return y

    with pytest.raises(TypeError, match="variable 'y' is GPU data in the `if` branch but CPU data"):
        pipe()


def test_gpu_condition_is_an_error():
    @pipeline_def(enable_conditionals=True, batch_size=2, num_threads=1, device_id=0)
    def pipe():
        c = fn.external_source(constant_source([np.bool_(True), np.bool_(False)]), device="gpu")
        if c:
            y = 1
        else:
            y = 2
        return y

    with pytest.raises(TypeError, match="condition `c` is GPU data"):
        pipe()


def test_early_return_inside_a_loop_is_an_error():
    def body(fn, types, c, x):
        for _ in range(1):
            if c:
                return x
        return x

    with pytest.raises(ValueError, match="left the `if` early"):
        run(torchdali, body, COND, X)


def test_source_must_be_available():
    namespace = {"fn": fn}
    exec("def body():\n    return fn.random.coin_flip()\n", namespace)
    with pytest.raises(ValueError, match="source of body is not available"):
        pipeline_def(namespace["body"], enable_conditionals=True, batch_size=1, num_threads=1)()


def test_docs_examples_run(tmp_path):
    """docs/conditionals.md's code blocks, in order, as one file (conversion reads sources)."""
    fork_or_skip()  # an example has a parallel external_source
    import os
    import re
    import runpy
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "conditionals.md")
    with open(doc) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 3
    script = tmp_path / "conditionals_doc.py"
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script), run_name="conditionals_doc")


def yields_in_branches(c, x):
    if c:
        yield x + 1
    else:
        yield x


def calls_a_generator(fn, types, c, x):
    return list(yields_in_branches(c, x))[0]


def test_yield_in_a_per_sample_branch_is_an_error():
    with pytest.raises(ValueError, match="`yield` inside a branch is not supported"):
        run(torchdali, calls_a_generator, COND, X)


def test_a_dense_batch_stays_dense_through_split_and_merge():
    """A dense batch is split by gathers and merged by scatters, in the predicate's order."""
    data = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)

    @pipeline_def(batch_size=6, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        x = fn.external_source(lambda: data, batch=True)
        if fn.external_source(lambda: np.array([1, 0, 0, 1, 1, 0], np.int32), batch=True):
            x = x * 2
        else:
            x = x + 100
        return x

    (out,) = pipe().run()
    assert out.dense_tensor() is not None
    np.testing.assert_array_equal(out.as_array(), np.where(np.array([1, 0, 0, 1, 1, 0])[:, None], data * 2, data + 100))
