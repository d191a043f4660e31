"""Which part of the batch each DataNode holds while a conditional pipeline is defined.

A DataNode belongs to a *path*: the open per-sample `if`s (and the branch taken in
each) it was computed under; `()` is the whole batch. When an operator uses a
DataNode computed under a shorter path, the DataNode is split by each `if` in between
(`_conditional.split`, cached per `if`), so a branch's operators see only the samples
of that branch — inputs and argument inputs alike. Operators without any DataNode
input (readers, random numbers without inputs, constants) run on the whole batch, as
in DALI, and their outputs are split where a branch uses them: a random number drawn
inside a branch is drawn for every sample and the branch takes its samples' values.
"""
import contextlib

from ..graph import DataNode, call_operator


class _Entry:
    """One open per-sample `if`: its predicate (at the enclosing path) and the branch traced now."""

    def __init__(self, predicate, text):
        self.predicate = predicate
        self.text = text
        self.branch = None  # True or False while a branch is traced
        self.splits = {}  # id(node) -> (node, (true part, false part))


class ConditionStack:
    """The open `if`s of the pipeline being defined and the path of every DataNode."""

    def __init__(self):
        self.entries = []
        self._paths = {}  # id(node) -> (node, path); the node is kept so its id stays unique
        self._raw = False  # while adding split/merge nodes, which place their outputs themselves

    def path(self):
        return tuple((e, e.branch) for e in self.entries)

    def path_of(self, node):
        return self._paths.get(id(node), (None, ()))[1]

    def _place(self, node, path):
        self._paths[id(node)] = (node, path)

    # --- the hook of graph.call_operator ---
    def route_inputs(self, inputs, arg_inputs):
        """The inputs and argument inputs of an operator called now, split for the current branch."""
        if self._raw:
            return inputs, arg_inputs
        return [self.route(x) for x in inputs], {k: self.route(v) for k, v in arg_inputs.items()}

    def placed(self, op):
        """Record where the outputs of a new operator live: the current branch if it has
        inputs, else the whole batch."""
        if self._raw:
            return
        path = self.path() if (op.inputs or op.arg_inputs) else ()
        op.in_branch = bool(path)
        for out in op.outputs:
            self._place(out, path)

    # --- splitting and merging ---
    def route(self, node):
        """`node` as seen by the branch traced now."""
        if not isinstance(node, DataNode):
            return node
        have, want = self.path_of(node), self.path()
        if want[:len(have)] != have:
            raise ValueError(f"{node.name} was computed inside a per-sample `if` branch and is used outside "
                             "it; only variables assigned in both branches are merged after the `if` "
                             "(values kept in lists, dicts or attributes inside a branch are not)")
        for depth in range(len(have), len(want)):
            entry, branch = want[depth]
            cached = entry.splits.get(id(node))
            if cached is None:
                parts = self._split(node, entry, want[:depth])
                entry.splits[id(node)] = (node, parts)
            else:
                parts = cached[1]
            node = parts[0] if branch else parts[1]
        return node

    def _split(self, node, entry, parent):
        with self._raw_mode():
            true, false = call_operator("_conditional.split", [node],
                                        {"predicate": entry.predicate, "condition": entry.text})
        true.source.in_branch = bool(parent)
        self._place(true, parent + ((entry, True),))
        self._place(false, parent + ((entry, False),))
        return true, false

    def merge(self, entry, true, false, what):
        """One batch from the two branches' values of `entry` (both DataNodes of one device)."""
        with self._raw_mode():
            out = call_operator("_conditional.merge", [true, false],
                                {"predicate": entry.predicate, "what": what, "condition": entry.text})
        parent = self.path()[:-1]
        out.source.in_branch = bool(parent)
        self._place(out, parent)
        return out

    @contextlib.contextmanager
    def _raw_mode(self):
        self._raw = True
        try:
            yield
        finally:
            self._raw = False

    # --- the open `if`s ---
    def push(self, condition, text):
        """Open a per-sample `if` on `condition` (a DataNode, routed to the current branch)."""
        predicate = self.route(condition)
        if predicate.device != "cpu":
            raise TypeError(f"the condition `{text}` is GPU data; conditions of per-sample `if`s and "
                            "logical expressions must be computed on the CPU")
        entry = _Entry(predicate, text)
        self.entries.append(entry)
        return entry

    def pop(self, entry):
        if self.entries and self.entries[-1] is entry:
            self.entries.pop()

    def check_outputs(self, outputs):
        """Pipeline outputs must hold the whole batch."""
        for i, out in enumerate(outputs):
            if isinstance(out, DataNode) and self.path_of(out):
                raise ValueError(f"output {i} ({out.name}) was computed inside a per-sample `if` branch "
                                 "and never merged; assign it to a variable in every branch")
