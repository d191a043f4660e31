"""Generates the operator reference (docs/operators.md) from the operator registry.

    python -m torchdali.docs > docs/operators.md
"""
from . import fn  # noqa: F401  (registers every operator)
from . import schema


def operator_reference():
    lines = ["# Operator reference", "",
             "Generated from the operator registry by `python -m torchdali.docs`; do not edit.", ""]
    for op in sorted(schema.all_schemas().values(), key=lambda s: s.name):
        if op.internal:
            continue
        lines += [f"## fn.{op.name}", "", f"`ops` classes: {', '.join('ops.' + c for c in op.class_names)}  ",
                  f"Devices: {', '.join(op.devices)}  ",
                  f"Inputs: {op.min_inputs}" + (f" to {op.max_inputs}" if op.max_inputs != op.min_inputs else ""),
                  "", op.doc.strip(), "", "| argument | type | default | per-sample | description |",
                  "| --- | --- | --- | --- | --- |"]
        for arg in op.args.values():
            default = "required" if arg.required else f"`{arg.default!r}`"
            choices = f" One of {', '.join(repr(c) for c in arg.choices)}." if arg.choices else ""
            per_sample = "yes, or per frame" if arg.per_frame else "yes" if arg.per_sample else ""
            lines.append(f"| `{arg.name}` | {arg.type} | {default} | {per_sample} | "
                         f"{arg.doc}{choices} |")
        for old, new in op.deprecated_args.items():
            lines.append(f"| `{old}` | deprecated | | | {'alias of `' + new + '`' if new else 'ignored'} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(operator_reference(), end="")
