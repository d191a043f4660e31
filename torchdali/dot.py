"""Graphviz export of a pipeline graph (`Pipeline.save_graph_to_dot_file`), drawn as DALI
draws it: an edge from each operator to each operator consuming its outputs; with
`show_tensors`, those edges dotted and each output a box, labelled with the output index
and the consumer's input index (argument inputs numbered after the positional inputs);
with `use_colors`, operators coloured by stage (CPU blue, mixed cyan, GPU NVIDIA green)."""
from .graph import topological_order

_COLORS = {"cpu": "blue", "mixed": "cyan", "gpu": "#76b900"}


def _id(name):
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_to_dot(outputs, sinks=(), show_tensors=False, use_colors=False):
    ops = topological_order(outputs, sinks)
    consumers = {}  # (op id, output index) -> [(consumer, input index)]
    for op in ops:
        for i, x in enumerate(list(op.inputs) + list(op.arg_inputs.values())):
            consumers.setdefault((x.source.id, x.index), []).append((op, i))
    lines = ["digraph graphname {"]
    for op in ops:
        if use_colors:
            lines.append(f'{_id(op.name)}[color="{_COLORS[op.device]}"];')
        children = []
        for k in range(len(op.outputs)):
            for child, _ in consumers.get((op.id, k), []):
                if child not in children:
                    children.append(child)
        style = "[style=dotted]" if show_tensors else ""
        lines.extend(f"{_id(op.name)} -> {_id(child.name)}{style};" for child in children)
        if show_tensors:
            for k, out in enumerate(op.outputs):
                lines.append(f"{_id(out.name)}[shape=box];")
                lines.append(f"{_id(op.name)} -> {_id(out.name)}[label={k}];")
                lines.extend(f"{_id(out.name)} -> {_id(child.name)}[label={i}];"
                             for child, i in consumers.get((op.id, k), []))
        lines.append("")
    lines.append("}")
    return "\n".join(lines) + "\n"
