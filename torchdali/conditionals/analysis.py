"""Static facts the `if` rewrite needs about a function's AST: which names a branch
assigns, which of them are read after the `if` (live), and tail `return`s lifted out
of `if`s so that a per-sample `if` whose branches both return can be merged."""
import ast

RETURN_VAR = "__tdc_ret"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def walk_scope(node):
    """`node` and the nodes under it that belong to its scope, in source order: the
    bodies of nested functions, classes, lambdas and comprehensions are not entered
    (a def binds its name here, and its decorators and defaults run here)."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        children = list(node.decorator_list)
        if not isinstance(node, ast.ClassDef):
            children += [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
    elif isinstance(node, (ast.Lambda,) + _COMPREHENSIONS):
        children = []
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from walk_scope(child)


def assigned(stmts):
    """Names bound by these statements in the enclosing function's scope, in first-seen order."""
    names = {}
    for stmt in stmts:
        for n in walk_scope(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                names[n.id] = None
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[n.name] = None
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for alias in n.names:
                    if alias.name != "*":
                        names[(alias.asname or alias.name).split(".")[0]] = None
            elif isinstance(n, ast.ExceptHandler) and n.name:
                names[n.name] = None
            elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
                names[n.name] = None
            elif isinstance(n, ast.MatchMapping) and n.rest:
                names[n.rest] = None
    return [k for k in names if not k.startswith("__tdc_if")]


def _loads(node):
    """Every name read anywhere inside `node`, nested scopes included (an over-approximation)."""
    out = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out |= {n.target.id for n in ast.walk(node) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    return out


def always_live(fdef):
    """Names live everywhere in `fdef`: declared global/nonlocal, or read by a nested
    function or lambda (which may run at any later point)."""
    out = set()
    for n in ast.walk(fdef):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
        elif n is not fdef and isinstance(n, _SCOPES):
            out |= _loads(n)
    return out


def annotate_liveness(stmts, live_out, annotations):
    """Backward liveness over a statement list; stores, for every `if` statement, the set
    of names read after it in `annotations[id(if_node)]`. Returns the names live before
    `stmts`. Loops, `try` and `with` are handled conservatively (no kills inside)."""
    live = set(live_out)
    for s in reversed(stmts):
        live = _live_stmt(s, live, annotations)
    return live


def _live_stmt(s, out, ann):
    if isinstance(s, ast.If):
        ann[id(s)] = set(out)
        return _loads(s.test) | annotate_liveness(s.body, out, ann) | annotate_liveness(s.orelse, out, ann)
    if isinstance(s, ast.Return):
        return _loads(s)
    if isinstance(s, (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.Match)) or \
            type(s).__name__ == "TryStar":
        inner = out | _loads(s)
        for field in ("body", "orelse", "finalbody"):
            annotate_liveness(getattr(s, field, []), inner, ann)
        for block in getattr(s, "handlers", []) + getattr(s, "cases", []):
            annotate_liveness(block.body, inner, ann)
        return inner
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (out - {s.name}) | _loads(s)
    return (out - set(assigned([s]))) | _loads(s)


def always_returns(stmts):
    """The block ends in a `return`, directly or in both branches of a final `if`."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and always_returns(last.body) and always_returns(last.orelse)


def lift_returns(stmts):
    """Rewrite `if c: ...return a` + rest into `if c: ...return a / else: rest`, and, where
    every path of the final `if` returns, its returns into `__tdc_ret = ...` followed by
    one `return __tdc_ret`. Plain Python behaves the same; a per-sample `if` can then
    merge the returned values. `stmts` is the function's own top-level block."""
    _early_returns_to_else(stmts)
    last = stmts[-1] if stmts else None
    if not isinstance(last, ast.If) or not always_returns(last.body):
        return
    if not last.orelse:
        last.orelse = [ast.copy_location(ast.Return(value=None), last)]
    if always_returns(last.orelse):
        _returns_to_assignments(last)
        stmts.append(ast.copy_location(ast.Return(value=ast.Name(RETURN_VAR, ast.Load())), last))


def _early_returns_to_else(stmts):
    for i, s in enumerate(stmts):
        if isinstance(s, ast.If) and not s.orelse and always_returns(s.body) and i + 1 < len(stmts):
            s.orelse = stmts[i + 1:]
            del stmts[i + 1:]
            break
    if stmts and isinstance(stmts[-1], ast.If):
        _early_returns_to_else(stmts[-1].body)
        _early_returns_to_else(stmts[-1].orelse)


def _returns_to_assignments(if_node):
    for block in (if_node.body, if_node.orelse):
        last = block[-1]
        if isinstance(last, ast.Return):
            value = last.value if last.value is not None else ast.Constant(None)
            block[-1] = ast.copy_location(ast.Assign(targets=[ast.Name(RETURN_VAR, ast.Store())], value=value), last)
        else:
            _returns_to_assignments(last)
