"""Which module a django.tasks row may make this process import, judged before importing it.

A row names its task by module path, and anyone who can write the job table
(a database account, an admin user, an SQL injection elsewhere) can write any
path. The worker and ``get_result`` import that module to find the Task, and
importing runs the module's top-level code: that, not calling the function, is
the risk (the call is only made on a django.tasks ``Task`` of our backend,
checked after the import in :mod:`.backend`). So before a module that is not
already imported is imported, its path must be plain Python names, must not be
in the standard library, must be a source (or bytecode) file found on
``sys.path`` by the ordinary path finder, and its code, read without running it,
must define the named function at module level the way a task is defined
(decorated, or rebound by an assignment). A module of a script, a test suite or
a package with side effects at import is then refused without being run, unless
it really defines a decorated function of that name. See the "Threat model"
section of docs/reference/django-tasks.md.

Two policies (``OPTIONS["IMPORT_POLICY"]``): ``"checked"`` (the default) allows
any module that passes these checks, so that every module-level ``@task`` the
framework accepts runs with no configuration; ``"strict"`` allows only the
trusted modules: installed apps' ``tasks`` modules and ``OPTIONS["MODULES"]``.
Trusted modules skip the source check in both.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from keyword import iskeyword

__all__ = [
    "CHECKED",
    "IMPORT_POLICIES",
    "MAX_PATH_LENGTH",
    "STRICT",
    "path_problem",
    "source_problem",
    "split_path",
    "trusted",
]

CHECKED = "checked"
STRICT = "strict"
#: Values of ``OPTIONS["IMPORT_POLICY"]``.
IMPORT_POLICIES = (CHECKED, STRICT)
#: A task path longer than the job table's ``task_name`` column cannot be a real task.
MAX_PATH_LENGTH = 255

_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)


def split_path(path: str) -> tuple[str, str]:
    """``"pkg.mod.func"`` → ``("pkg.mod", "func")``."""
    module_name, _, attribute = path.rpartition(".")
    return module_name, attribute


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be a task's module path (None if it can), from the text alone.

    Every part must be a Python identifier as the parser would spell it (so
    ``"os.system; rm -rf /"``, ``"../x"``, a control character or a full-width
    ``os``, U+FF4F U+FF53, is refused), not a keyword, and not a dunder name:
    no task lives in ``__main__`` (no worker can import it) or under ``__init__``, and a
    dunder attribute (``__globals__``, ``__class__``) is never a task.
    """
    if not isinstance(path, str):
        return f"{path!r} is not a module path"
    if len(path) > MAX_PATH_LENGTH:
        return f"a {len(path)}-character name is not a module path (at most {MAX_PATH_LENGTH})"
    parts = path.split(".")
    if len(parts) < 2:
        return f"{path!r} is not a module path (module.function)"
    for part in parts:
        if not part.isidentifier() or unicodedata.normalize("NFKC", part) != part:
            return f"{path!r} is not a module path ({part!r} is not a Python name)"
        if iskeyword(part):
            return f"{path!r} is not a module path ({part!r} is a keyword)"
        if part.startswith("__"):
            return f"{path!r} names a dunder name ({part!r}), which is never a task"
    return None


def trusted(module_name: str, prefixes: Iterable[str]) -> bool:
    """Whether ``module_name`` is one of ``prefixes`` or inside one."""
    return any(module_name == prefix or module_name.startswith(prefix + ".") for prefix in prefixes)


_verdicts: dict[tuple[str, str], str | None] = {}
_verdicts_lock = threading.Lock()


def source_problem(module_name: str, attribute: str, *, imported_is_enough: bool) -> str | None:
    """Why importing ``module_name`` for a task named ``attribute`` is refused, or None.

    ``imported_is_enough``: a module already in ``sys.modules`` runs no code
    when imported again, so the worker needs no further check for it (the
    Task check after the import still applies). ``enqueue`` passes False: the
    worker's process may not have it imported, and must accept what was enqueued.
    Verdicts are cached per process: a deploy replaces the processes.
    """
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names:
        return f"module {module_name!r} is in the standard library, which defines no tasks"
    if imported_is_enough and module_name in sys.modules:
        return None
    key = (module_name, attribute)
    if key in _verdicts:
        return _verdicts[key]
    verdict = _inspect(module_name, attribute)
    with _verdicts_lock:
        _verdicts[key] = verdict
    return verdict


def _find_spec(module_name: str) -> importlib.machinery.ModuleSpec | str:
    """The module's spec as the path finder gives it, without running any module.

    Parent packages already imported give their ``__path__``; the others are
    located from ``sys.path``, package by package, without running their
    ``__init__``. The module itself is always located afresh, as a worker
    process that has not imported it would find it (not through an import
    hook of this process, such as pytest's).
    """
    parts = module_name.split(".")
    search: Sequence[str] | None = None
    spec = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        imported = sys.modules.get(name)
        if depth < len(parts) and getattr(imported, "__path__", None) is not None:
            search = list(imported.__path__)  # type: ignore[union-attr]
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
        except (ImportError, ValueError, OSError) as exc:
            return f"cannot find module {name!r}: {exc}"
        if spec is None:
            return f"cannot import module {module_name!r}: No module named {name!r}"
        if depth < len(parts):
            locations = spec.submodule_search_locations
            if locations is None:
                return f"cannot import module {module_name!r}: {name!r} is not a package"
            search = list(locations)
    assert spec is not None
    return spec


def _inspect(module_name: str, attribute: str) -> str | None:
    spec = _find_spec(module_name)
    if isinstance(spec, str):
        return spec
    loader = spec.loader
    if not isinstance(loader, _LOADERS):
        kind = "a namespace package" if loader is None else type(loader).__name__
        return (
            f"module {module_name!r} is not a Python file on sys.path ({kind}), so it "
            "was not imported"
        )
    try:
        source = loader.get_source(module_name)
    except (ImportError, OSError, UnicodeDecodeError, SyntaxError) as exc:
        return f"cannot read module {module_name!r}: {exc}"
    if source is None:  # bytecode only: the code object still says what it defines
        return _bytecode_problem(loader, module_name, attribute)
    try:
        tree = ast.parse(source, filename=str(spec.origin))
    except (SyntaxError, ValueError) as exc:
        return f"module {module_name!r} does not parse: {exc}"
    if _defines_task_shape(tree.body, attribute):
        return None
    return (
        f"module {module_name!r} does not define a decorated function {attribute!r} at "
        "module level (read without running it), so it was not imported"
    )


def _defines_task_shape(body: list[ast.stmt], attribute: str) -> bool:
    """A top-level ``def attribute`` that is decorated or rebound by an assignment.

    Top level includes the blocks of top-level ``if``/``try``/``with`` (they
    open no scope), as the module's own namespace does.
    """
    defined = decorated = assigned = False
    for node in _top_level(body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute:
            defined = True
            decorated = decorated or bool(node.decorator_list)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigned = assigned or any(
                isinstance(t, ast.Name) and t.id == attribute for t in targets
            )
    return defined and (decorated or assigned)


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With | ast.AsyncWith):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try | ast.TryStar):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)


def _bytecode_problem(
    loader: importlib.machinery.SourceFileLoader | importlib.machinery.SourcelessFileLoader,
    module_name: str,
    attribute: str,
) -> str | None:
    """For a module shipped as bytecode only: a module-level function of that name.

    Decorators cannot be seen in bytecode as simply as in source, so this is
    weaker than the source check (and documented as such).
    """
    try:
        code = loader.get_code(module_name)
    except (ImportError, OSError, EOFError, ValueError) as exc:
        return f"cannot read module {module_name!r}: {exc}"
    if code is not None and any(
        getattr(const, "co_qualname", None) == attribute for const in code.co_consts
    ):
        return None
    return (
        f"module {module_name!r} does not define a function {attribute!r} at module "
        "level, so it was not imported"
    )
