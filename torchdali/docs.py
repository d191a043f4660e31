"""Generates the operator reference of the documentation site from the operator registry:
docs/operators.md (the families, every operator in a line, the arguments all of them take)
and a page per family, docs/operators/<family>.md (each operator's devices, inputs and
arguments table, and an example for the common ones, from torchdali/docs_examples.py).

    python -m torchdali.docs        # writes those pages into the repository's docs/
"""
import dataclasses
import enum
import os
import re
import sys

from . import fn  # noqa: F401  (registers every operator)
from . import schema
from .docs_examples import EXAMPLES, PRELUDE

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
GENERATED = "<!-- Generated from the operator registry by `python -m torchdali.docs`; do not edit. -->"


@dataclasses.dataclass(frozen=True)
class Family:
    """A page of the reference: the operators whose name starts with one of `prefixes` or is
    one of `names`. `{docs}` in the introduction is the way from the page to docs/."""

    slug: str
    title: str
    intro: str
    prefixes: tuple = ()
    names: tuple = ()

    def holds(self, name):
        return name in self.names or name.startswith(self.prefixes)


FAMILIES = (
    Family("readers", "Readers and sources",
           "Where a pipeline's data comes from: files, archives and record formats on disk or at URLs "
           "(see [Storage formats]({docs}storage.md)), or Python code.",
           ("readers.", "io."), ("external_source",)),
    Family("decoders", "Decoders",
           "Encoded bytes to arrays: images (JPEG on our own CPU and GPU decoders, PNG and the other formats "
           "torchvision or Pillow reads), crops decoded without the rest of the image, NumPy and LZ4 data.",
           ("decoders.",), ("peek_image_shape", "dump_image")),
    Family("geometry", "Resize, crop and geometry",
           "Resampling, cropping, flipping, warping and padding images (HWC or CHW), volumes and sequences.",
           (), ("resize", "random_resized_crop", "crop", "crop_mirror_normalize", "resize_crop_mirror",
                "tensor_resize", "flip", "rotate", "warp_affine", "slice", "pad", "paste", "multi_paste", "jitter",
                "water", "sphere", "roi_random_crop", "random_crop_generator")),
    Family("transforms", "Affine transforms and coordinates",
           "Affine transforms as data (2×3 or 3×4 matrices per sample) for `warp_affine` and `coord_transform`, "
           "and operators on point coordinates.",
           ("transforms.",), ("coord_transform", "coord_flip")),
    Family("color", "Colour",
           "Brightness, contrast, hue and saturation, colour spaces, histograms and lookup tables.",
           (), ("brightness", "contrast", "brightness_contrast", "saturation", "hue", "hsv", "color_twist",
                "color_space_conversion", "equalize", "clahe", "debayer", "lookup_table",
                "jpeg_compression_distortion")),
    Family("filters", "Filters and erasing",
           "Convolutions and other neighbourhood filters, and operators that blank out regions.",
           (), ("gaussian_blur", "filter", "laplacian", "erase", "grid_mask")),
    Family("detection", "Boxes, detection and segmentation",
           "Bounding boxes that follow their images through crops, flips and pastes, SSD's random crop and "
           "box encoder, and the segmentation helpers.",
           ("segmentation.",), ("bb_flip", "bbox_paste", "bbox_rotate", "box_encoder", "random_bbox_crop",
                                "ssd_random_crop")),
    Family("random", "Random numbers",
           "Random values per sample, deterministic for a pipeline's `seed`; usually given to other operators "
           "as argument inputs.",
           ("random.",), ("batch_permutation",)),
    Family("noise", "Noise", "Random noise added to images or any data.", ("noise.",)),
    Family("reductions", "Reductions",
           "Statistics of each sample over some or all of its axes (or over the whole batch).", ("reductions.",)),
    Family("tensors", "Tensors, shapes and types",
           "Type conversions, reshaping, stacking and concatenating, constants, normalization, sequences "
           "and per-sample properties.",
           (), ("cast", "cast_like", "cat", "stack", "reshape", "reinterpret", "squeeze", "expand_dims",
                "transpose", "one_hot", "normalize", "constant", "full", "full_like", "ones", "ones_like", "zeros",
                "zeros_like", "copy", "element_extract", "get_property", "permute_batch", "sequence_rearrange",
                "per_frame")),
    Family("python", "Python operators",
           "Your own Python function on a pipeline's batches: NumPy on the CPU, CuPy or torch on the GPU.",
           (), ("python_function", "torch_python_function", "dl_tensor_python_function")),
    Family("experimental", "Experimental", "DALI's `fn.experimental` operators.", ("experimental.",)),
)
OTHER = Family("other", "Other operators", "Operators not yet sorted into a family.")


def public_operators():
    """The schemas of the operators `fn` exposes, sorted by name."""
    return sorted((op for op in schema.all_schemas().values() if not op.internal), key=lambda op: op.name)


def family_of(op):
    """The first family that holds the operator, or OTHER."""
    return next((f for f in FAMILIES if f.holds(op.name)), OTHER)


def anchor(heading):
    """The id Python-Markdown's table of contents gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def summary(op):
    """The first sentence of an operator's doc on one line: up to the first full stop or colon
    outside parentheses (a colon that opens a list becomes a full stop)."""
    text = " ".join(op.doc.split())
    depth = 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and c in ".:" and text[i + 1:i + 2] in ("", " ") and \
                not re.search(r"\b(e\.g|i\.e|etc|vs)$", text[:i]):
            return text[:i] + "."
    return text


def _outside_code(text, replace):
    """`text` with `replace` applied to what lies outside its code spans."""
    parts = str(text).split("`")
    return "`".join(p if i % 2 else replace(p) for i, p in enumerate(parts))


def _prose(text):
    """A doc text as Markdown: a '<' outside code spans is text, not the start of an HTML tag."""
    return _outside_code(text, lambda p: p.replace("<", "&lt;"))


def _cell(text):
    """Text for a table cell: one line, its pipes escaped except in code spans (where
    Python-Markdown's tables already keep them, and a backslash would show)."""
    return _outside_code(_prose(str(text).replace("\n", " ")), lambda p: p.replace("|", "\\|"))


def _value(v):
    """A default or choice as code: DALI's enums as `types.NAME`, anything else as its repr."""
    return f"types.{v.name}" if isinstance(v, enum.Enum) else repr(v)


def _arguments_table(op, common):
    lines = ["| argument | type | default | per-sample | description |", "| --- | --- | --- | --- | --- |"]
    for arg in op.args.values():
        if arg in common:
            continue
        default = "required" if arg.required else f"`{_value(arg.default)}`"
        choices = f" One of {', '.join(_value(c) for c in arg.choices)}." if arg.choices else ""
        per_sample = "yes, or per frame" if arg.per_frame else "yes" if arg.per_sample else ""
        lines.append(f"| `{arg.name}` | {arg.type} | {_cell(default)} | {per_sample} | {_cell(arg.doc + choices)} |")
    for old, new in op.deprecated_args.items():
        lines.append(f"| `{old}` | deprecated | | | {'alias of `' + new + '`' if new else 'ignored'} |")
    return lines if len(lines) > 2 else ["No arguments of its own."]


def operator_section(op):
    """An operator's part of its family page."""
    common = [a for a in schema.COMMON_ARGS if op.args.get(a.name) is a]
    inputs = f"{op.min_inputs}" + (f" to {op.max_inputs}" if op.max_inputs != op.min_inputs else "")
    if op.input_names:
        inputs += f" (`{'`, `'.join(op.input_names)}`)"
    facts = [f"Devices: {', '.join(op.devices)}", f"Inputs: {inputs}",
             f"`ops` classes: {', '.join('`ops.' + c + '`' for c in dict.fromkeys(op.class_names))}"]
    if op.other_names:
        facts.append("Also called: " + ", ".join(f"`fn.{n}`" for n in op.other_names))
    if op.deprecated_names:
        facts.append("Deprecated names: " + ", ".join(f"`fn.{n}`" for n in op.deprecated_names))
    if op.deprecated_use:
        facts.append(f"Deprecated: use `{op.replacement}`")
    lines = [f"## fn.{op.name}", "", "  \n".join(facts), "", _prose(op.doc.strip()), ""]
    lines += _arguments_table(op, common)
    if len(common) < len(schema.COMMON_ARGS):
        lines += ["", "Common arguments: only " + (", ".join(f"`{a.name}`" for a in common) or "none") + "."]
    if op.name in EXAMPLES:
        lines += ["", "Example:", "", "```python", EXAMPLES[op.name].rstrip(), "```"]
    return lines + [""]


def family_page(family, ops):
    """The page of one family: its introduction and each operator's section."""
    lines = [GENERATED, "", f"# {family.title}", "", family.intro.format(docs="../"), ""]
    if any(op.name in EXAMPLES for op in ops):
        lines += ["Examples run after the [common prelude](../operators.md#examples).", ""]
    for op in ops:
        lines += operator_section(op)
    return "\n".join(lines)


def index_page(groups):
    """docs/operators.md: the arguments all operators take, the examples' prelude and every
    family with its operators in a line each."""
    count = sum(len(ops) for _, ops in groups)
    lines = [GENERATED, "", "# Operator reference", "",
             f"{count} operators, generated from the operator registry (`torchdali/schema.py`). Each is "
             "`fn.<name>(inputs..., **arguments)` and `ops.<Class>(**arguments)(inputs...)`, with DALI's names, "
             "arguments and defaults. An argument marked *per-sample* may be given as an argument input: a "
             "DataNode from a CPU operator (e.g. `angle=fn.random.uniform(range=(-10, 10))`), read per sample "
             "at every iteration; the others take a constant.", "",
             "## Common arguments", "", "Every operator also takes these (unless its page says otherwise):", "",
             "| argument | type | default | description |", "| --- | --- | --- | --- |"]
    for arg in schema.COMMON_ARGS:
        lines.append(f"| `{arg.name}` | {arg.type} | `{arg.default!r}` | {_cell(arg.doc)} |")
    lines += ["", "## Examples", "",
              "The examples of the common operators are complete code: each runs on the CPU after this prelude, "
              "as a test does (`tests/test_docs_site.py`). On a GPU, give the pipeline `device_id=0` and "
              "decode with `device=\"mixed\"`.", "", "```python", PRELUDE.rstrip(), "```", ""]
    for family, ops in groups:
        lines += [f"## [{family.title}](operators/{family.slug}.md)", "", family.intro.format(docs=""), "",
                  "| operator | what it does |", "| --- | --- |"]
        for op in ops:
            link = f"operators/{family.slug}.md#{anchor('fn.' + op.name)}"
            lines.append(f"| [`fn.{op.name}`]({link}) | {_cell(summary(op))} |")
        lines.append("")
    return "\n".join(lines)


def reference_pages():
    """{path under docs/: text} of every generated page."""
    groups = {}
    for op in public_operators():
        groups.setdefault(family_of(op), []).append(op)
    ordered = [(f, groups[f]) for f in FAMILIES + (OTHER,) if f in groups]
    pages = {"operators.md": index_page(ordered)}
    for family, ops in ordered:
        pages[f"operators/{family.slug}.md"] = family_page(family, ops)
    return pages


def write_pages(docs=DOCS):
    """Write the generated pages under `docs` and remove family pages no longer generated."""
    pages = reference_pages()
    os.makedirs(os.path.join(docs, "operators"), exist_ok=True)
    for name in os.listdir(os.path.join(docs, "operators")):
        if name.endswith(".md") and f"operators/{name}" not in pages:
            os.remove(os.path.join(docs, "operators", name))
    for path, text in pages.items():
        with open(os.path.join(docs, path), "w") as f:
            f.write(text)
    return pages


if __name__ == "__main__":
    written = write_pages()
    print(f"wrote {len(written)} pages under {DOCS}", file=sys.stderr)
