"""The fuzz set (tests/fuzz_cases.py): adversarial calls of every image operator and every
torch op, each run in a child process so that a crash or a stall is a failing case and not
the end of the run. Every case ends in a valid result or in a Python exception that names
the operator (or the file) and the argument changed, never in a raw internal error."""
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fuzz_cases

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

SEED = 0
CASE_SECONDS = 60  # a case taking longer stalls
# Errors that say nothing of what is wrong to a user (internal types and allocator text).
RAW = re.compile(r"ZeroDivisionError|IndexError|KeyError|AttributeError|UnboundLocalError|NameError|bad_alloc|"
                 r"_M_|Internal error|values to unpack|Expected a value of type|OverflowError|can't allocate|"
                 r"cannot convert float|not subscriptable|NoneType|Storage size calculation|Dimension out of range")
# An argument whose errors may name what it sets instead.
ALIASES = {"start": ("anchor",), "end": ("anchor", "shape")}


def run_cases(device):
    """{case index: result} for every case, starting a new child after one that died or stalled."""
    here = Path(__file__).parent
    path = os.pathsep.join(filter(None, [str(here.parent), os.environ.get("PYTHONPATH")]))  # torchdali, installed or not
    total = len(fuzz_cases.cases(SEED, device))
    results, first = {}, 0
    while first < total:
        child = subprocess.Popen([sys.executable, str(here / "fuzz_cases.py"), device, str(SEED), str(first)],
                                 cwd=here, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started = None
        while True:
            ready, _, _ = select.select([child.stdout], [], [], CASE_SECONDS)
            line = child.stdout.readline() if ready else None
            if not line:  # the child died (end of output) or stalled
                if line is None:
                    child.kill()
                child.wait()
                if started is not None and started not in results:
                    results[started] = {"outcome": "stalled" if line is None else
                                        f"killed the process (exit {child.returncode})"}
                first = (started if started is not None else first) + 1
                break
            r = json.loads(line)
            if r["outcome"] == "start":
                started = r["case"]
            else:
                results[r["case"]] = r
        if len(results) >= total:
            break
    return results


def judge(case, result):
    """What is wrong with a case's result, or None."""
    kind, op, _, args, changed = case
    if result["outcome"] == "ok":
        return None
    if result["outcome"] != "error":
        return result["outcome"]
    message = result["message"]
    if RAW.search(message):
        return "a raw internal error"
    named = op.split(".")[-1] in message or (op.startswith("read_") and "cannot read '" in message)
    if not named:
        return "the operator is not named"
    if kind == "fn" and changed != "input" and not any(re.search(rf"\b{a}\b", message)
                                                       for a in (changed,) + ALIASES.get(changed, ())):
        return f"the argument {changed!r} is not named"
    return None


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="no CUDA device"))])
def test_every_fuzz_case_ends_in_a_result_or_a_named_error(device):
    start = time.time()
    cases = fuzz_cases.cases(SEED, device)
    results = run_cases(device)
    bad = []
    for i, case in enumerate(cases):
        why = judge(case, results.get(i, {"outcome": "no result"}))
        if why:
            bad.append(f"case {i} {case[1]} {case[4]}={case[3].get(case[4], case[2])}: {why}: "
                       f"{results.get(i, {}).get('message', '')[:300]}")
    errors = sum(r["outcome"] == "error" for r in results.values())
    print(f"fuzz ({device}): {len(cases)} cases, {errors} named errors, {len(cases) - errors - len(bad)} results, "
          f"{time.time() - start:.0f} s")
    assert not bad, f"{len(bad)} of {len(cases)} cases:\n" + "\n".join(bad)


def test_the_judge_catches_what_it_must():
    """A crash, a stall, a raw error and an unnamed argument each fail a case."""
    case = ("fn", "resize", fuzz_cases.GOOD_INPUT, {"size": [1.0, 2.0]}, "size")
    assert judge(case, {"outcome": "ok"}) is None
    assert judge(case, {"outcome": "error", "message": "resize ('r'): argument 'size' ..."}) is None
    assert judge(case, {"outcome": "killed the process (exit -11)"})
    assert judge(case, {"outcome": "stalled"})
    assert judge(case, {"outcome": "error", "message": "resize ('r'): ZeroDivisionError: division by zero"})
    assert judge(case, {"outcome": "error", "message": "resize ('r'): the output is empty"})
    assert judge(("torch", "flip", None, {}, "torch"), {"outcome": "error", "message": "Dimension out of range"})


NOT_IMAGE_OPERATORS = {"external_source", "python_function", "torch_python_function", "dl_tensor_python_function",
                       "bb_flip", "bbox_paste", "box_encoder", "random_bbox_crop", "bbox_rotate", "ssd_random_crop",  # boxes
                       "roi_random_crop", "random_crop_generator",  # shapes in, windows out: their own tests
                       "per_frame",  # a layout marker: tests/test_per_frame.py
                       "full", "ones", "zeros", "constant", "batch_permutation",  # no inputs
                       "full_like", "cast_like", "filter",  # two inputs: their own tests
                       "peek_image_shape",  # encoded bytes
                       "element_extract", "sequence_rearrange",  # sequences
                       "debayer",  # one-channel Bayer images of even extents
                       "dump_image"}  # writes files into the working directory: tests/test_dump.py
NOT_FUZZED_HERE = {  # torch ops: the GPU decoder's (CUDA only) and the thread count read-out
    "decode_jpegs", "decode_jpegs_start", "decode_jpegs_finish", "jpeg_hardware_decoder", "cpu_threads"}


def test_every_image_operator_and_torch_op_has_cases_and_each_valid_call_runs():
    """Readers, decoders (tests/test_png_check.py, the bad files of test_decoders_image.py) and
    random generators take no images; every other operator is fuzzed from a call that works."""
    import torch
    from torchdali import schema

    public = {n for n in schema.all_schemas() if not schema.get(n).internal}
    image_ops = {n for n in public if "." not in n} - NOT_IMAGE_OPERATORS
    assert set(fuzz_cases.OPERATORS) == image_ops
    fuzz_cases._ops()
    torch_ops = {n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                 if n.startswith("torchdali::")}
    assert set(fuzz_cases.TORCH_CASES) == torch_ops - NOT_FUZZED_HERE
    for op, (base, _) in fuzz_cases.OPERATORS.items():
        fuzz_cases.run_case(("fn", op, fuzz_cases.GOOD_INPUT, base, "input"), "cpu")
