"""The AST rewrite behind `enable_conditionals`.

`convert(func)` recompiles a function from its source with:
- `if` statements as `with __tdc_.if_stmt(...)` blocks that run plain Python for a
  Python condition and trace both branches for a DataNode condition;
- `a and b`, `a or b`, `not a`, `a if c else b` through `__tdc_` (short-circuit kept);
- every call `f(...)` as `__tdc_.call(f)(...)`, so the functions the definition calls
  are converted when called (not those merely passed, such as external_source
  callbacks), unless marked `@do_not_convert` or part of torchdali, torch, NumPy or
  the standard library.
The new function shares the original's globals and closure cells, so it sees the
same variables; line numbers are kept, so tracebacks point at the user's source.
"""
import ast
import inspect
import sys
import textwrap
import types

from . import analysis

RUNTIME = "__tdc_"
_SKIP_PACKAGES = frozenset(sys.stdlib_module_names) | {
    "torchdali", "torch", "numpy", "nvidia", "PIL", "cv2", "scipy", "cupy", "numba", "torchvision",
    "pytest", "_pytest"}
_UNCONVERTED_CALLS = {"super", "locals", "globals", "vars", "eval", "exec"}
_converted_code = set()  # code objects this module compiled (already converted)
_cache = {}  # original code object -> converted code object (None: cannot convert)


class ConversionError(Exception):
    """The source of a function could not be read or rewritten."""


def call(f):
    """What a rewritten call site calls: `f` converted, or `f` itself when it is not converted."""
    if isinstance(f, types.MethodType):
        func = _convertible(f.__func__)
        return types.MethodType(func, f.__self__) if func is not f.__func__ else f
    if isinstance(f, types.FunctionType):
        return _convertible(f)
    method = getattr(type(f), "__call__", None)
    if isinstance(method, types.FunctionType):  # an instance of a class with a Python __call__
        func = _convertible(method)
        return types.MethodType(func, f) if func is not method else f
    return f


def _convertible(func):
    if getattr(func, "_torchdali_do_not_convert", False) or func.__code__ in _converted_code:
        return func
    module = (getattr(func, "__module__", None) or "").split(".")[0]
    if module in _SKIP_PACKAGES:
        return func
    try:
        return convert(func)
    except ConversionError:
        return func  # no source (e.g. defined in a REPL): called as it is


def convert(func):
    """`func` with conditionals rewritten (a new function; `func` is unchanged)."""
    code = func.__code__
    if code not in _cache:
        try:
            _cache[code] = _compile(func)
        except ConversionError:
            _cache[code] = None
            raise
    new_code = _cache[code]
    if new_code is None:
        raise ConversionError(f"{func.__qualname__} cannot be converted")
    cells = dict(zip(code.co_freevars, func.__closure__ or ()))
    cells[RUNTIME] = types.CellType(_runtime())
    new = types.FunctionType(new_code, func.__globals__, func.__name__, func.__defaults__,
                             tuple(cells[name] for name in new_code.co_freevars))
    new.__kwdefaults__ = func.__kwdefaults__
    new.__dict__.update(func.__dict__)
    for attr in ("__qualname__", "__module__", "__doc__", "__annotations__"):
        setattr(new, attr, getattr(func, attr))
    return new


def _runtime():
    from . import runtime
    return runtime


def _compile(func):
    code = func.__code__
    if code.co_name == "<lambda>" or "__class__" in code.co_freevars:
        raise ConversionError(f"{func.__qualname__}: lambdas and methods using super() are not converted")
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError) as e:
        raise ConversionError(f"the source of {func.__qualname__} is not available ({e}); define it in "
                              "a file (or a notebook cell) rather than an interactive prompt") from None
    try:
        # `if 1:` keeps any indentation valid (methods, nested functions).
        tree = ast.parse("if 1:\n" + textwrap.indent("".join(lines), " "))
    except SyntaxError as e:
        raise ConversionError(f"the source of {func.__qualname__} cannot be parsed ({e})") from None
    fdef = tree.body[0].body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fdef.name != code.co_name:
        raise ConversionError(f"the source of {func.__qualname__} is not a def statement")
    ast.increment_lineno(fdef, first - 2)
    fdef.decorator_list = []  # already applied to `func`
    fdef = _Rewriter().rewrite_function(fdef)
    # A factory makes the closure variables (and the runtime) free variables of the new code.
    factory = ast.FunctionDef(
        name="__tdc_factory", args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in
                                                                       (RUNTIME,) + code.co_freevars],
                                                  kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fdef], decorator_list=[], returns=None,
        **({"type_params": []} if sys.version_info >= (3, 12) else {}))
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new_code = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    _remember(new_code)
    return new_code


def _remember(code):
    _converted_code.add(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _remember(c)


def _is_do_not_convert(decorator):
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
    return name == "do_not_convert"


def _unsafe_in_lambda(node):
    """Expressions that can't move into a lambda unchanged."""
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node))


def _rt(attr):
    return ast.Attribute(value=ast.Name(RUNTIME, ast.Load()), attr=attr, ctx=ast.Load())


def _lambda(body):
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                      body=body)


_IF_TEMPLATE = """
with __tdc_.if_stmt(TEST, TEXT, NAMES, GETTERS, LIVE, YIELDS) as {c}:
    if {c}.true_branch():
        BODY
        {c}.end_branch()
    if {c}.false_branch():
        if {c}.per_sample:
            RESTORE
        ORELSE
        {c}.end_branch()
    if {c}.finish():
        MERGE
"""


class _Rewriter(ast.NodeTransformer):
    """Rewrites one function (and the functions defined in it)."""

    def __init__(self):
        self.count = 0
        self.live = {}  # id(if node) -> names read after it

    def rewrite_function(self, fdef):
        analysis.lift_returns(fdef.body)
        always = analysis.always_live(fdef)
        analysis.annotate_liveness(fdef.body, set(), self.live)
        for key in self.live:
            self.live[key] |= always
        fdef.body = [self.visit(s) for s in fdef.body]
        fdef.body = [s for stmt in fdef.body for s in (stmt if isinstance(stmt, list) else [stmt])]
        fdef.decorator_list = [self.visit(d) for d in fdef.decorator_list]
        fdef.args = self.visit(fdef.args)
        return fdef

    # --- scopes ---
    def visit_FunctionDef(self, node):
        if any(_is_do_not_convert(d) for d in node.decorator_list):
            return node
        return _Rewriter().rewrite_function(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        return node  # class bodies are left as written

    # --- statements ---
    def visit_If(self, node):
        names = analysis.assigned(node.body + node.orelse)
        changed = set(analysis.assigned(node.body))  # restored before the `else` branch is traced
        live = [n for n in names if n in self.live.get(id(node), ())]
        text = ast.unparse(node.test)
        self.generic_visit(node)
        self.count += 1
        c = f"__tdc_if{self.count}"
        stmts = _at(node, ast.parse(_IF_TEMPLATE.format(c=c)).body)
        holes = {
            "TEST": node.test, "TEXT": ast.Constant(text),
            "NAMES": ast.Tuple([ast.Constant(n) for n in names], ast.Load()),
            "GETTERS": ast.Tuple([_lambda(ast.Name(n, ast.Load())) for n in names], ast.Load()),
            "LIVE": ast.Tuple([ast.Constant(n) for n in live], ast.Load()),
            "YIELDS": ast.Constant(any(isinstance(n, (ast.Yield, ast.YieldFrom)) for b in (node.body, node.orelse)
                                       for s in b for n in analysis.walk_scope(s))),
        }
        blocks = {
            "BODY": node.body, "ORELSE": node.orelse,
            "RESTORE": _at(node, [s for i, n in enumerate(names) if n in changed
                                  for s in _restore(c, i, n)] or [ast.Pass()]),
            "MERGE": _at(node, [_assign(live, f"{c}.merged")] if live else [ast.Pass()]),
        }
        return [_Fill(holes, blocks).visit(s) for s in stmts]

    # --- expressions ---
    def visit_BoolOp(self, node):
        text = ast.unparse(node)
        self.generic_visit(node)
        if _unsafe_in_lambda(node):
            return node
        kind = "and_" if isinstance(node.op, ast.And) else "or_"
        result = node.values[-1]
        for value in reversed(node.values[:-1]):
            result = ast.Call(_rt(kind), [value, _lambda(result), ast.Constant(text)], [])
        return ast.copy_location(result, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(ast.Call(_rt("not_"), [node.operand], []), node)

    def visit_IfExp(self, node):
        text = ast.unparse(node.test)
        self.generic_visit(node)
        if _unsafe_in_lambda(node):
            return node
        return ast.copy_location(ast.Call(_rt("if_exp"), [node.test, _lambda(node.body), _lambda(node.orelse),
                                                          ast.Constant(text)], []), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and (node.func.id in _UNCONVERTED_CALLS or
                                                node.func.id.startswith(RUNTIME)):
            return node
        node.func = ast.copy_location(ast.Call(_rt("call"), [node.func], []), node.func)
        return node


def _at(node, stmts):
    """Generated statements, placed on the line of the user's `node` (for tracebacks)."""
    for n in (n for s in stmts for n in ast.walk(s)):
        if isinstance(n, (ast.stmt, ast.expr, ast.excepthandler, ast.arg)):
            ast.copy_location(n, node)
    return stmts


def _restore(c, i, name):
    """Statements giving `name` its value from before the `if` again (unbound if it had none)."""
    return ast.parse(f"if {c}.defined({i}):\n    {name} = {c}.initial[{i}]\n"
                     f"else:\n    try:\n        del {name}\n    except NameError:\n        pass\n").body


def _assign(names, source):
    target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
    return ast.Assign(targets=[target], value=ast.parse(source, mode="eval").body)


class _Fill(ast.NodeTransformer):
    """Puts expressions and statement blocks into the placeholders of a template."""

    def __init__(self, holes, blocks):
        self.holes = holes
        self.blocks = blocks

    def visit_Name(self, node):
        return self.holes.get(node.id, node)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.blocks:
            return self.blocks[node.value.id] or [ast.Pass()]
        return self.generic_visit(node)
