"""Draw a pipeline's graph: builds the ImageNet training pipeline of examples/imagenet_train.py,
writes its graph with `pipe.save_graph_to_dot_file(...)` (Graphviz's DOT format, as DALI writes
it: operators coloured by stage, CPU blue, mixed cyan, GPU green; with show_tensors, each output
a box and the input index on each edge) and renders that file as a PNG.

Graphviz is not needed: the script reads the DOT file back (nodes, edges and their attributes)
and draws it with matplotlib, in layers from left to right (each node after all its
predecessors, as close to its consumers as they allow). Where Graphviz is installed, `dot -Tpng graph.dot -o graph.png`
draws the same file. Defining the graph needs no GPU: the GPU variant is drawn by default.

    python examples/pipeline_graph.py [--out docs/images/pipeline_graph.png] [--dot graph.dot] [--cpu]
"""
import argparse
import os
import re
import tempfile

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from imagenet_train import HybridTrainPipe  # examples/imagenet_train.py, beside this file

QUOTED = r'"((?:[^"\\]|\\.)*)"'
STATEMENT = re.compile(rf"^{QUOTED}\s*(?:->\s*{QUOTED})?\s*(?:\[(.*)\])?\s*;$")
ATTRIBUTE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s\]]+)')
STAGES = {"blue": "CPU", "cyan": "mixed", "#76b900": "GPU"}


def parse_dot(text):
    """The nodes ({name: attributes}, in order of first mention) and edges ([(tail, head,
    attributes)]) of a DOT digraph written as save_graph_to_dot_file writes it."""
    nodes, edges = {}, []
    for line in text.splitlines():
        match = STATEMENT.match(line.strip())
        if not match:
            continue
        tail, head, attrs = match.groups()
        attrs = {k: v.strip('"') for k, v in ATTRIBUTE.findall(attrs or "")}
        tail = unescape(tail)
        if head is None:
            nodes.setdefault(tail, {}).update(attrs)
            continue
        head = unescape(head)
        nodes.setdefault(tail, {})
        nodes.setdefault(head, {})
        edges.append((tail, head, attrs))
    return nodes, edges


def unescape(name):
    """A quoted DOT name's text: \\" is ", \\\\ is \\."""
    return re.sub(r"\\(.)", r"\1", name)


def layers(nodes, edges):
    """Each node's column: one after its longest chain of predecessors, then moved right as far
    as its consumers allow (so inputs such as random numbers sit next to where they are used)."""
    parents = {n: [t for t, h, _ in edges if h == n] for n in nodes}
    children = {n: [h for t, h, _ in edges if t == n] for n in nodes}
    layer = {}

    def depth(n):
        if n not in layer:
            layer[n] = 1 + max((depth(p) for p in parents[n]), default=-1)
        return layer[n]

    for n in nodes:
        depth(n)
    for n in sorted(nodes, key=layer.get, reverse=True):
        if children[n]:
            layer[n] = min(layer[c] for c in children[n]) - 1
    return layer


def positions(nodes, edges, layer):
    """(x, y) of each node: x its layer; y the mean row of its predecessors (rounded, then moved
    down past the rows already taken in its layer), so a chain of operators stays on one row."""
    columns = {}
    for n in nodes:
        columns.setdefault(layer[n], []).append(n)
    row = {}
    for x in sorted(columns):
        def wanted(n):
            rows = [row[t] for t, h, _ in edges if h == n and t in row]
            return round(sum(rows) / len(rows)) if rows else None
        taken = -1
        for n in sorted(columns[x], key=lambda n: (wanted(n) is None, wanted(n) or 0)):
            row[n] = taken = max(taken + 1, wanted(n) or 0)
    return {n: (layer[n], -row[n]) for n in nodes}


def draw(nodes, edges, out, title):
    layer = layers(nodes, edges)
    xy = positions(nodes, edges, layer)
    width = max(layer.values()) + 1
    height = 1 - min(y for _, y in xy.values())
    fig, ax = plt.subplots(figsize=(2.0 * width + 0.5, 1.0 * height + 1.4))
    boxes = {}
    for n, attrs in nodes.items():
        tensor = attrs.get("shape") == "box"
        boxes[n] = ax.text(*xy[n], n, ha="center", va="center", fontsize=8 if tensor else 9,
                           bbox=dict(boxstyle="square,pad=0.3" if tensor else "round,pad=0.5", facecolor="white",
                                     edgecolor=attrs.get("color", "black"), linewidth=1 if tensor else 2))
    for tail, head, attrs in edges:
        dotted = attrs.get("style") == "dotted"
        # The operator -> operator edges (dotted) arc over the tensors, or under them when rising.
        bend = (0.35 if xy[head][1] > xy[tail][1] else -0.35) if dotted else 0
        ax.annotate("", xy=xy[head], xytext=xy[tail], arrowprops=dict(
            arrowstyle="-|>", color="grey" if dotted else "black", linestyle=":" if dotted else "-",
            patchA=boxes[tail], patchB=boxes[head], shrinkA=2, shrinkB=2, connectionstyle=f"arc3,rad={bend}"))
        if "label" in attrs:
            (x0, y0), (x1, y1) = xy[tail], xy[head]
            ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.06, attrs["label"], fontsize=7, color="dimgrey",
                    ha="center")
    colours = sorted({a["color"] for a in nodes.values() if "color" in a}, key=list(STAGES).index)
    ax.legend([Line2D([], [], color=c, linewidth=3) for c in colours], [STAGES[c] for c in colours],
              loc="upper left", fontsize=8, title="stage", title_fontsize=8, frameon=False)
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(-height + 0.4, 1.0)  # room for the arcs above
    ax.set_title(title, fontsize=10)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join("docs", "images", "pipeline_graph.png"))
    p.add_argument("--dot", default=os.path.join(tempfile.gettempdir(), "imagenet_train_pipeline.dot"),
                   help="where the DOT file is written")
    p.add_argument("--cpu", action="store_true", help="draw the CPU variant (cpu decoding and augmentations)")
    args = p.parse_args(argv)
    pipe = HybridTrainPipe(batch_size=256, num_threads=4, device_id=None if args.cpu else 0,
                           data_dir=tempfile.gettempdir(), crop=224, dali_cpu=args.cpu)
    pipe.save_graph_to_dot_file(args.dot, show_tensors=True, use_colors=True)
    with open(args.dot) as f:
        nodes, edges = parse_dot(f.read())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    draw(nodes, edges, args.out, f"HybridTrainPipe ({'CPU' if args.cpu else 'GPU'} variant): "
                                 "save_graph_to_dot_file(show_tensors=True, use_colors=True)")
    print(f"wrote {args.dot} ({len(nodes)} nodes, {len(edges)} edges) and {args.out}")


if __name__ == "__main__":
    main()
