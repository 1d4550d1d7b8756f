"""WCAG 2.1 AA contrast of every colour our admin CSS draws, in the light and the dark theme.

The colours are read, not copied: Django admin's ``base.css`` and ``dark_mode.css``
(the installed Django's) and our ``static/django_arcature/*.css`` are parsed for
their custom properties per theme, ``var()`` references are followed, and each
rule of ours that sets a colour is paired with the backgrounds it is drawn on
(``ON`` below). A rule that sets a colour and is not in ``ON`` fails the test, so
a new coloured rule must say where it is drawn; a colour change that breaks a
ratio fails it too. Text needs 4.5:1 (WCAG 1.4.3), bars, outlines and focus
rings 3:1 (1.4.11).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import django
import pytest

OURS = sorted(
    (Path(__file__).resolve().parents[2] / "django_arcature/static/django_arcature").glob("*.css")
)
ADMIN_CSS = Path(django.__file__).parent / "contrib/admin/static/admin/css"
THEIRS = [ADMIN_CSS / "base.css", ADMIN_CSS / "dark_mode.css"]
ADMIN = next(path for path in OURS if path.name == "admin.css")

TEXT, GRAPHIC = 4.5, 3.0
#: Rows of a change list alternate --body-bg and --darkened-bg; a ticked row is --selected-row.
ROWS = ("--body-bg", "--darkened-bg", "--selected-row")
PAGE = ("--body-bg",)

#: Our selector → (minimum ratio, the backgrounds it is drawn on). A background is a
#: custom property, or "self" for a rule that sets its own background and colour.
ON: dict[str, tuple[float, tuple[str, ...]]] = {
    "#result_list tbody a:link": (TEXT, ROWS),
    "#result_list tbody a:visited": (TEXT, ROWS),
    "#result_list tbody a:focus": (TEXT, ROWS),
    "#result_list tbody a:hover": (TEXT, ROWS),
    ".arcature-dashboard-main tbody a:link": (TEXT, ROWS[:2]),
    ".arcature-dashboard-main tbody a:visited": (TEXT, ROWS[:2]),
    ".arcature-dashboard-main tbody a:focus": (TEXT, ROWS[:2]),
    ".arcature-dashboard-main tbody a:hover": (TEXT, ROWS[:2]),
    ".arcature-dashboard-main a.arcature-dead:link": (TEXT, ROWS[:2]),
    ".arcature-dashboard-main a.arcature-dead:visited": (TEXT, ROWS[:2]),
    ".arcature-pre": (TEXT, ("self",)),
    ".arcature-status-dead": (TEXT, ROWS),
    ".arcature-status-running": (TEXT, ROWS),
    ".arcature-status-cancelled": (TEXT, ROWS),
    ".object-tools .arcature-button": (TEXT, ("self",)),
    ".arcature-chart .arcature-axis-label": (TEXT, PAGE),
    ".arcature-chart .arcature-empty": (TEXT, PAGE),
    ".arcature-legend": (TEXT, PAGE),
    ".arcature-chart-data summary": (TEXT, PAGE),
    ".arcature-chart .arcature-bar-succeeded": (GRAPHIC, PAGE),
    ".arcature-swatch .arcature-swatch-succeeded": (GRAPHIC, PAGE),
    ".arcature-chart .arcature-bar-failed": (GRAPHIC, PAGE),
    ".arcature-swatch .arcature-swatch-failed": (GRAPHIC, PAGE),
    ".arcature-chart .arcature-hatch-fill": (GRAPHIC, PAGE),
    # The hatch's stripes must show against the failed colour, or the pattern is lost.
    ".arcature-chart .arcature-hatch-stripe": (GRAPHIC, ("--arcature-chart-failed",)),
    ".object-tools .arcature-button:focus-visible": (GRAPHIC, PAGE),
    ".arcature-chart-data summary:focus-visible": (GRAPHIC, PAGE),
}
#: A button state that sets only a background: the text colour is its base rule's.
TEXT_FROM = {
    ".object-tools .arcature-button:hover": ".object-tools .arcature-button",
    ".object-tools .arcature-button:focus": ".object-tools .arcature-button",
    ".object-tools .arcature-button-cancel": ".object-tools .arcature-button",
    ".object-tools .arcature-button-cancel:hover": ".object-tools .arcature-button",
    ".object-tools .arcature-button-cancel:focus": ".object-tools .arcature-button",
}
#: Colours that carry no information, with why.
DECORATIVE = {
    ".arcature-chart .arcature-grid line": "grid lines: the axis labels carry the values",
}
COLOUR_PROPERTIES = ("color", "fill", "stroke", "outline", "outline-color", "background")


# --- WCAG 2.1 relative luminance and contrast ratio ------------------------------------------


def parse_hex(value: str) -> tuple[int, int, int]:
    digits = value.strip().lstrip("#")
    if len(digits) == 3:
        digits = "".join(c * 2 for c in digits)
    if not re.fullmatch(r"[0-9a-fA-F]{6}", digits):
        raise ValueError(f"not a #rgb or #rrggbb colour: {value!r}")
    return (int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16))


def relative_luminance(rgb: tuple[int, int, int]) -> float:
    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    light, dark = sorted((relative_luminance(parse_hex(a)), relative_luminance(parse_hex(b))))[::-1]
    return (light + 0.05) / (dark + 0.05)


# --- Reading the CSS ----------------------------------------------------------------------------


@dataclass
class Rule:
    selectors: list[str]
    declarations: dict[str, str]
    media: str


def rules(css: str) -> list[Rule]:
    """The style rules of a stylesheet, each with the ``@media`` condition around it (or "")."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    found: list[Rule] = []

    def walk(text: str, media: str) -> None:
        at = 0
        while True:
            start = text.find("{", at)
            if start < 0:
                return
            prelude = text[at:start].strip()
            depth, end = 1, start + 1
            while depth:
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
            body = text[start + 1 : end - 1]
            if prelude.startswith("@media"):
                walk(body, prelude[len("@media") :].strip())
            elif not prelude.startswith("@"):
                declarations = {}
                for item in body.split(";"):
                    name, sep, value = item.partition(":")
                    if sep:
                        declarations[name.strip()] = " ".join(value.split())
                selectors = [" ".join(s.split()) for s in prelude.split(",")]
                found.append(Rule(selectors, declarations, media))
            at = end

    walk(css, "")
    return found


DARK_MEDIA = "(prefers-color-scheme: dark)"
LIGHT_SELECTORS = {":root", 'html[data-theme="light"]'}


def properties(paths: list[Path]) -> dict[str, dict[str, str]]:
    """Custom properties per theme: "light", "dark" (the toggle's), "dark-auto" (the system's)."""
    themes: dict[str, dict[str, str]] = {"light": {}, "dark": {}, "dark-auto": {}}
    for path in paths:
        for rule in rules(path.read_text(encoding="utf-8")):
            custom = {k: v for k, v in rule.declarations.items() if k.startswith("--")}
            if not custom:
                continue
            if rule.media == DARK_MEDIA and ":root" in rule.selectors:
                themes["dark-auto"].update(custom)
            elif not rule.media and 'html[data-theme="dark"]' in rule.selectors:
                themes["dark"].update(custom)
            elif not rule.media and LIGHT_SELECTORS & set(rule.selectors):
                themes["light"].update(custom)
    return themes


def theme_values(paths: list[Path]) -> dict[str, dict[str, str]]:
    themes = properties(paths)
    light = themes["light"]
    return {
        "light": light,
        "dark": {**light, **themes["dark"]},
        "dark-auto": {**light, **themes["dark-auto"]},
    }


def resolve(value: str, values: dict[str, str], seen: tuple[str, ...] = ()) -> str:
    """A colour as #rrggbb, following ``var(--name)`` through the theme's properties."""
    value = value.strip()
    match = re.fullmatch(r"var\((--[\w-]+)\)", value)
    if match:
        name = match.group(1)
        if name in seen:
            raise ValueError(f"var() cycle: {' → '.join((*seen, name))}")
        if name not in values:
            raise KeyError(f"{name} is defined in no theme")
        return resolve(values[name], values, (*seen, name))
    keywords = {"white": "#ffffff", "black": "#000000", "#fff": "#ffffff", "#000": "#000000"}
    return keywords.get(value.lower(), value)


def colour_of(declaration: str) -> str | None:
    """The colour part of a declaration such as ``2px solid var(--body-fg)``, if any."""
    match = re.search(r"var\(--[\w-]+\)|#[0-9a-fA-F]{3,6}\b", declaration)
    return match.group(0) if match else None


def our_colour_rules(paths: list[Path]) -> dict[str, dict[str, str]]:
    """Our selectors (one per selector of a list) → the colour declarations they make."""
    found: dict[str, dict[str, str]] = {}
    for path in paths:
        for rule in rules(path.read_text(encoding="utf-8")):
            colours = {
                name: colour
                for name in COLOUR_PROPERTIES
                if name in rule.declarations and (colour := colour_of(rule.declarations[name]))
            }
            if not colours:
                continue
            for selector in rule.selectors:
                found.setdefault(selector, {}).update(colours)
    return found


def contrast_failures(ours: list[Path], theirs: list[Path]) -> list[str]:
    """Every pair below its minimum, and every coloured rule with no declared background."""
    themes = theme_values([*theirs, *ours])
    coloured = our_colour_rules(ours)
    problems = [
        f"{selector}: sets {sorted(colours)}; ON, TEXT_FROM or DECORATIVE must say what is behind"
        for selector, colours in coloured.items()
        if selector not in ON and selector not in TEXT_FROM and selector not in DECORATIVE
    ]
    for theme, values in themes.items():
        for selector, colours in coloured.items():
            pairs: list[tuple[str, str, float]] = []
            if selector in ON:
                minimum, backgrounds = ON[selector]
                fg = next(
                    colours[p] for p in COLOUR_PROPERTIES if p in colours and p != "background"
                )
                for background in backgrounds:
                    bg = colours["background"] if background == "self" else f"var({background})"
                    pairs.append((fg, bg, minimum))
            elif selector in TEXT_FROM:
                pairs.append((coloured[TEXT_FROM[selector]]["color"], colours["background"], TEXT))
            for fg, bg, minimum in pairs:
                ratio = contrast(resolve(fg, values), resolve(bg, values))
                if ratio < minimum:
                    problems.append(
                        f"[{theme}] {selector}: {fg} on {bg} is {ratio:.2f}:1, needs {minimum}:1"
                    )
    return problems


# --- The tests ----------------------------------------------------------------------------------


def test_the_luminance_function_matches_known_ratios() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777", "#777") == pytest.approx(1.0)
    assert contrast("#ffffff", "#767676") == pytest.approx(4.54, abs=0.01)  # the usual AA grey
    # The audit's numbers: Django's light link on --darkened-bg, and the two chart series.
    assert contrast("#417893", "#f8f8f8") == pytest.approx(4.56, abs=0.01)
    assert contrast("#417893", "#ba2121") == pytest.approx(1.30, abs=0.01)
    assert contrast("#81d4fa", "#e35f5f") == pytest.approx(2.10, abs=0.01)
    with pytest.raises(ValueError, match="not a #rgb"):
        parse_hex("rgb(0, 0, 0)")


def test_our_colours_meet_wcag_aa_in_both_themes() -> None:
    assert OURS, "no stylesheet found under django_arcature/static/django_arcature/"
    problems = contrast_failures(OURS, THEIRS)
    assert not problems, "contrast below WCAG 2.1 AA:\n" + "\n".join(problems)


def test_every_pair_is_computed_from_the_css() -> None:
    """The check reads the colours: each theme resolves our variables to real colours."""
    themes = theme_values([*THEIRS, *OURS])
    assert resolve("var(--arcature-chart-succeeded)", themes["light"]) == "#417893"
    assert resolve("var(--arcature-chart-succeeded)", themes["dark"]) == "#81d4fa"
    assert resolve("var(--arcature-error-fg)", themes["dark"]) != resolve(
        "var(--arcature-error-fg)", themes["light"]
    )
    # Every pair in ON names a selector our CSS still has (no stale entries).
    assert set(ON) | set(TEXT_FROM) | set(DECORATIVE) == set(our_colour_rules(OURS))


def test_the_dark_theme_is_the_same_from_the_toggle_and_the_system_preference() -> None:
    """Our dark values are written twice (as Django's are); the two copies must agree."""
    ours = properties(OURS)
    assert ours["dark"], "our CSS sets no dark-theme property"
    assert ours["dark"] == ours["dark-auto"]


@pytest.mark.parametrize(
    ("variable", "value", "expect"),
    [
        # The failed series as pale as the stripes between its hatches.
        ("--arcature-chart-failed", "#f4c6c6", "arcature-hatch-stripe"),
        # A paler link shade in the change list's rows.
        ("--arcature-link-fg", "#7aa7bd", "#result_list tbody a:link"),
    ],
)
def test_a_colour_change_that_breaks_contrast_fails(
    tmp_path: Path, variable: str, value: str, expect: str
) -> None:
    broken = tmp_path / "admin.css"
    broken.write_text(
        ADMIN.read_text(encoding="utf-8")
        + f'\nhtml[data-theme="light"], :root {{ {variable}: {value}; }}\n',
        encoding="utf-8",
    )
    problems = contrast_failures([broken], THEIRS)
    assert any(expect in problem and "[light]" in problem for problem in problems), problems


def test_a_coloured_rule_without_a_background_fails(tmp_path: Path) -> None:
    extra = tmp_path / "admin.css"
    extra.write_text(
        ADMIN.read_text(encoding="utf-8") + "\n.arcature-new-badge { color: var(--link-fg); }\n",
        encoding="utf-8",
    )
    problems = contrast_failures([extra], THEIRS)
    assert any(problem.startswith(".arcature-new-badge: sets") for problem in problems)
