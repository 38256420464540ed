"""pyproject says requires-python >= 3.10, while CI runs a newer Python: a static guard that neither the package
nor the tests use syntax or standard-library names that 3.10 lacks (tomllib once broke `run` on 3.10). A name
under an `if sys.version_info >= (3, 11):` branch is allowed: that branch never runs on 3.10."""
import ast
from pathlib import Path

from conftest import ROOT

FILES = sorted(p for top in ("neuraldbg_cli", "tests") for p in (ROOT / top).rglob("*.py"))

NEW_MODULES = {"tomllib", "wsgiref.types"}  # standard library from 3.11 on
NEW_NAMES = {  # module -> names added in 3.11 or later
    "typing": {"Self", "LiteralString", "Never", "NotRequired", "Required", "assert_never", "assert_type",
               "reveal_type", "TypeVarTuple", "Unpack", "dataclass_transform", "get_overloads", "clear_overloads",
               "TypeAliasType", "override", "get_protocol_members", "is_protocol", "ReadOnly", "TypeIs"},
    "enum": {"StrEnum", "ReprEnum", "EnumCheck", "FlagBoundary", "verify", "member", "nonmember", "global_enum",
             "show_flag_values", "EnumType"},
    "datetime": {"UTC"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Runner", "Barrier"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "math": {"exp2", "cbrt", "sumprod"},
    "operator": {"call"},
    "logging": {"getLevelNamesMapping", "getHandlerByName", "getHandlerNames"},
    "sys": {"exception"},
    "itertools": {"batched"},
}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
NEW_METHODS = {"add_note"}  # BaseException.add_note


def _is_newer_python_branch(node: ast.AST) -> bool:
    """`if sys.version_info >= (3, 11):` (or later)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
        return False
    left, op, right = node.test.left, node.test.ops[0], node.test.comparators[0]
    return (ast.unparse(left) == "sys.version_info" and isinstance(op, ast.GtE) and isinstance(right, ast.Tuple)
            and tuple(ast.literal_eval(right)) >= (3, 11))


def _nodes(tree: ast.AST):
    """Every node except those in the body of a newer-Python branch (its else branch is kept)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_newer_python_branch(node):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def _problems(path: Path) -> list[str]:
    src = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(src, str(path), feature_version=(3, 10))
    except SyntaxError as e:
        return [f"line {e.lineno}: syntax 3.10 lacks: {e.msg}"]
    nodes = list(_nodes(tree))
    aliases = {a.asname or a.name: a.name for node in nodes if isinstance(node, ast.Import)  # `import datetime as dt`
               for a in node.names if a.name in NEW_NAMES}
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name in NEW_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module in NEW_MODULES:
                found.append(f"line {node.lineno}: from {node.module}")
            found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name in NEW_NAMES.get(node.module, ())]
        elif isinstance(node, ast.Attribute):
            module = aliases.get(node.value.id) if isinstance(node.value, ast.Name) else None
            if node.attr in NEW_NAMES.get(module, ()) or node.attr in NEW_METHODS:
                found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            found.append(f"line {node.lineno}: {node.id}")
    return found


def test_package_and_tests_run_on_python_310():
    found = {str(p.relative_to(ROOT)): _problems(p) for p in FILES}
    assert FILES and not {p: f for p, f in found.items() if f}


def test_the_check_finds_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import tomllib\nimport datetime as dt\nfrom typing import Self\nx = dt.UTC\n"
                   "try:\n    pass\nexcept ValueError as e:\n    e.add_note('x')\n    raise ExceptionGroup('g', [e])\n")
    assert len(_problems(bad)) == 5, _problems(bad)
    bad.write_text("try:\n    pass\nexcept* ValueError:\n    pass\n")
    assert "syntax" in _problems(bad)[0]
    ok = tmp_path / "ok.py"
    ok.write_text("import sys\nif sys.version_info >= (3, 11):\n    import tomllib\n"
                  "else:\n    import tomli as tomllib\n")
    assert _problems(ok) == []
