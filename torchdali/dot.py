"""Graphviz export of a pipeline graph (`Pipeline.save_graph_to_dot_file`)."""
from .graph import topological_order

_COLORS = {"cpu": "cadetblue2", "mixed": "chartreuse2", "gpu": "#76b900"}


def graph_to_dot(outputs, sinks=(), show_tensors=False, use_colors=False):
    lines = ["digraph graphname {"]
    for op in topological_order(outputs, sinks):
        style = f', style=filled, fillcolor="{_COLORS[op.device]}"' if use_colors else ""
        lines.append(f'  "{op.name}" [label="{op.schema.name}\\n{op.name}"{style}];')
        for x in list(op.inputs) + list(op.arg_inputs.values()):
            if show_tensors:
                lines.append(f'  "{x.name}" [shape=box];')
                lines.append(f'  "{x.source.name}" -> "{x.name}";')
                lines.append(f'  "{x.name}" -> "{op.name}";')
            else:
                lines.append(f'  "{x.source.name}" -> "{op.name}";')
    lines.append("}")
    return "\n".join(lines) + "\n"
