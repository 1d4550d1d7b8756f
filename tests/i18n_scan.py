"""Find user-visible strings of the package that are not marked for translation.

Why a scanner of our own: ``makemessages`` only sees strings already wrapped in
gettext, so a new heading typed as plain text, or a check message passed as a
bare literal, would ship in English in every language without anything failing.
This reads the package the way a reviewer would:

* templates through Django's own template ``Lexer``: text outside
  ``{% translate %}``/``{% blocktranslate %}`` that has letters in it, and the
  values of the ``title``, ``alt``, ``aria-label`` and ``placeholder`` attributes;
* Python modules through ``ast``: the literal strings given as an admin message
  (``message_user``), an action's or a display's ``description``, a
  ``short_description``, a ``verbose_name``/``verbose_name_plural``, a
  ``help_text`` or a ``label``, and a system check's message and ``hint``, when
  no gettext call wraps them;
* management commands (``management/``) the same way, for what a person at a
  shell reads: a command's ``help``, an option's ``help=``, what is written to
  ``self.stdout``/``self.stderr``, and the message of a ``CommandError`` or of an
  ``argparse.ArgumentTypeError`` (argparse shows it under the option). Output for
  programs is not text to translate and carries no literal with words there
  (``json.dumps(report)``); the worker's log lines, which stay English, are
  ``logger`` calls, which this does not read.

In a ``gettext("... %(name)s") % {...}``, the values given to the placeholders
are read too: an English word passed in would show inside the translated
sentence. A literal assigned to a variable first and written later is out of
reach of this reading (the review catches it).

What is deliberately left in English is listed in ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import ast
import html.parser
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.template.base import Lexer, TokenType

PACKAGE = Path(__file__).resolve().parents[1] / "django_arcature"

#: (file relative to the package, exact text): strings meant to stay as they are.
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        # CSS class names in the dashboard's {% block bodyclass %}: markup, not text.
        ("templates/django_arcature/admin/dashboard.html", "app-"),
        ("templates/django_arcature/admin/dashboard.html", "arcature-dashboard"),
        # ensure_json(label="argument "): a word inside a MalformedPayload message,
        # which is stored in the job's last_error like a log line (English, like logs).
        ("core/payloads.py", "argument"),
        # The health probe's verdict line, as `python -m django_arcature.worker.health`
        # prints it without Django: what orchestrators record and alerts match on.
        ("management/commands/arcature_health.py", "unhealthy:"),
    }
)

#: Calls whose first argument is the text people read, and the keywords that carry it.
GETTEXT = frozenset(
    {
        "_",
        "gettext",
        "gettext_lazy",
        "ngettext",
        "ngettext_lazy",
        "pgettext",
        "pgettext_lazy",
        "npgettext",
        "npgettext_lazy",
        "gettext_noop",
    }
)
CHECK_MESSAGES = frozenset({"CheckMessage", "Debug", "Info", "Warning", "Error", "Critical"})
TEXT_KEYWORDS = frozenset({"verbose_name", "verbose_name_plural", "help_text", "label"})
TEXT_ATTRIBUTES = frozenset({"title", "alt", "aria-label", "placeholder"})
#: Class-level names whose string value is shown (a Meta's or an AppConfig's).
TEXT_CLASS_ATTRIBUTES = frozenset({"verbose_name", "verbose_name_plural", "short_description"})
#: Management commands: the exceptions whose message is shown to the person who typed it.
COMMAND_ERRORS = frozenset({"CommandError", "ArgumentTypeError"})
#: Management commands: the streams a person reads.
COMMAND_STREAMS = frozenset({"stdout", "stderr"})
COMMANDS = "management/"
LETTERS = re.compile(r"[^\W\d_]{2,}")
#: Stands for a template tag or variable in the HTML given to the parser: no letters.
HOLE = "\ufffc"


@dataclass(frozen=True, order=True)
class Unmarked:
    """One string that people would read in English whatever their language."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r}"


def has_words(text: str) -> bool:
    return LETTERS.search(text.replace(HOLE, " ")) is not None


# --- templates ---------------------------------------------------------------------------


def template_skeleton(source: str) -> str:
    """The template's HTML with every tag, variable, comment and translated block as a hole.

    Newlines are kept so the HTML parser's line numbers are the template's.
    """
    parts: list[str] = []
    depth = 0  # inside blocktranslate/blocktrans, or {% comment %}
    for token in Lexer(source).tokenize():
        content = token.contents
        if token.token_type == TokenType.BLOCK:
            name = content.split()[0] if content.split() else ""
            if name in {"blocktranslate", "blocktrans", "comment"}:
                depth += 1
            elif name in {"endblocktranslate", "endblocktrans", "endcomment"}:
                depth -= 1
        if token.token_type == TokenType.TEXT and depth == 0:
            parts.append(content)
        else:
            parts.append(HOLE + "\n" * content.count("\n"))
    return "".join(parts)


class _TemplateText(html.parser.HTMLParser):
    def __init__(self, path: str) -> None:
        super().__init__(convert_charrefs=True)
        self.path = path
        self.found: list[Unmarked] = []
        self.raw_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style"}:
            self.raw_text.append(tag)
        for name, value in attrs:
            if name in TEXT_ATTRIBUTES and value and has_words(value):
                self.found.append(Unmarked(self.path, self.getpos()[0], value.strip()))

    def handle_endtag(self, tag: str) -> None:
        if self.raw_text and self.raw_text[-1] == tag:
            self.raw_text.pop()

    def handle_data(self, data: str) -> None:
        if self.raw_text:
            return
        line = self.getpos()[0]
        # Each run of text between two template tags on its own: the reader sees them apart.
        for piece in data.split(HOLE):
            if has_words(piece):
                self.found.append(
                    Unmarked(
                        self.path,
                        line + piece.count("\n", 0, len(piece) - len(piece.lstrip())),
                        piece.strip(),
                    )
                )
            line += piece.count("\n")


def scan_template(source: str, path: str = "<template>") -> list[Unmarked]:
    parser = _TemplateText(path)
    parser.feed(template_skeleton(source))
    parser.close()
    return parser.found


# --- Python ------------------------------------------------------------------------------


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_gettext(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and _name(node.func) in GETTEXT


def _formatted(node: ast.expr) -> ast.expr:
    """The sentence of ``(gettext(a) if x else gettext(b)) % {...}``: a gettext call or not."""
    if isinstance(node, ast.IfExp) and _is_gettext(node.body) and _is_gettext(node.orelse):
        return node.body
    return node


def unmarked_literals(node: ast.expr) -> Iterator[ast.Constant]:
    """The string literals with words in ``node`` that no gettext call wraps."""
    if _is_gettext(node):
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str) and has_words(node.value):
            yield node
    elif isinstance(node, ast.JoinedStr):
        for value in node.values:
            yield from unmarked_literals(value)
    elif isinstance(node, ast.FormattedValue):
        yield from unmarked_literals(node.value)
    elif isinstance(node, ast.BinOp):
        yield from unmarked_literals(node.left)
        if isinstance(node.op, ast.Mod) and _is_gettext(_formatted(node.left)):
            # The values that fill the translated sentence's placeholders.
            if isinstance(node.right, ast.Dict):
                for value in node.right.values:
                    yield from unmarked_literals(value)
            else:
                yield from unmarked_literals(node.right)
        else:
            yield from unmarked_literals(node.right)
    elif isinstance(node, ast.Call):
        # "...".format(...) or format_html("...", ...): the template string is the text;
        # a command's self.style.WARNING("..."): the styled text. Not json.dumps(...).
        if isinstance(node.func, ast.Attribute):
            if _name(node.func.value) == "style" and node.args:
                yield from unmarked_literals(node.args[0])
            else:
                yield from unmarked_literals(node.func.value)
        elif node.args:
            yield from unmarked_literals(node.args[0])
    elif isinstance(node, ast.IfExp):
        yield from unmarked_literals(node.body)
        yield from unmarked_literals(node.orelse)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from unmarked_literals(element)


def shown_expressions(tree: ast.AST) -> Iterator[ast.expr]:
    """The expressions of a module whose value an operator reads."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if name == "message_user":
                if len(node.args) >= 2:
                    yield node.args[1]
                if "message" in keywords:
                    yield keywords["message"]
            if name in {"action", "display"} and "description" in keywords:
                yield keywords["description"]
            if name in CHECK_MESSAGES:
                if node.args:
                    yield node.args[0]
                for keyword in ("msg", "hint"):
                    if keyword in keywords:
                        yield keywords[keyword]
            for keyword in TEXT_KEYWORDS & keywords.keys():
                yield keywords[keyword]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if _name(target) in TEXT_CLASS_ATTRIBUTES and isinstance(
                    target, (ast.Name, ast.Attribute)
                ):
                    yield node.value


def command_expressions(tree: ast.AST) -> Iterator[ast.expr]:
    """What a management command shows the person at the shell."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "write"
                and _name(func.value) in COMMAND_STREAMS
                and node.args
            ):
                yield node.args[0]
            if _name(func) in COMMAND_ERRORS and node.args:
                yield node.args[0]
            if _name(func) == "add_argument" and "help" in keywords:
                yield keywords["help"]
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and any(
                    _name(target) == "help" for target in statement.targets
                ):
                    yield statement.value


def scan_python(source: str, path: str = "<module>") -> list[Unmarked]:
    tree = ast.parse(source)
    expressions = list(shown_expressions(tree))
    if path.startswith(COMMANDS):
        expressions += command_expressions(tree)
    found = {
        Unmarked(path, literal.lineno, str(literal.value).strip())
        for expression in expressions
        for literal in unmarked_literals(expression)
    }
    return sorted(found)


# --- the package -------------------------------------------------------------------------


def package_files() -> Iterable[Path]:
    yield from sorted((PACKAGE / "templates").rglob("*.html"))
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue  # historical: a migration records the English names it ran with
        yield path


def scan_package() -> list[Unmarked]:
    found: list[Unmarked] = []
    for path in package_files():
        relative = str(path.relative_to(PACKAGE))
        source = path.read_text(encoding="utf-8")
        scan = scan_template if path.suffix == ".html" else scan_python
        found += [u for u in scan(source, relative) if (u.path, u.text) not in ALLOWED]
    return found
