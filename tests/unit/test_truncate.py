"""truncate_for_storage: under the byte limit, valid UTF-8, cut on a character boundary."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_arcature.core.text import truncate_for_storage

MARK = "… [truncated]"
MARK_BYTES = len(MARK.encode())

# Text heavy in multi-byte characters: 2-byte (é, ж), 3-byte (€, 漢), 4-byte (😀, 𝄞),
# plus anything else, NUL and lone surrogates included.
multibyte = st.text(
    alphabet=st.sampled_from("aé€漢😀𝄞ж\n \x00")
    | st.characters(exclude_categories=())
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),
    max_size=400,
)


def storable(text: str) -> str:
    """What the function promises to keep: the text with NUL and surrogates replaced."""
    return "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


limits = st.integers(min_value=0, max_value=600)


@given(multibyte, limits)
def test_result_is_valid_utf8_within_the_limit(text: str, limit: int) -> None:
    stored = truncate_for_storage(text, limit)
    encoded = stored.encode("utf-8")  # raises on a lone surrogate
    assert len(encoded) <= limit
    assert "\x00" not in stored


@given(multibyte, limits)
def test_text_that_fits_is_kept_whole(text: str, limit: int) -> None:
    clean = storable(text)
    if len(clean.encode()) <= limit:
        assert truncate_for_storage(text, limit) == clean


@given(multibyte, st.integers(min_value=MARK_BYTES + 1, max_value=600))
def test_a_cut_keeps_a_prefix_and_says_it_was_cut(text: str, limit: int) -> None:
    clean = storable(text)
    if len(clean.encode()) <= limit:
        return
    stored = truncate_for_storage(text, limit)
    assert stored.endswith(MARK)
    kept = stored.removesuffix(MARK)
    assert clean.startswith(kept)
    # The cut is as late as the limit allows: the next character would not have fit.
    next_char = clean[len(kept)]
    assert len((kept + next_char).encode()) + MARK_BYTES > limit


@pytest.mark.parametrize(
    ("text", "limit", "stored"),
    [
        ("short", 2048, "short"),
        ("", 0, ""),
        ("abc", 0, ""),
        ("éé", 3, "é"),  # the second é would be cut in half: dropped whole
        ("😀😀", 7, "😀"),
        ("x" * 30, 20, "xxxxx" + MARK),  # 5 + 15 bytes of mark
        ("x" * 30, MARK_BYTES, "x" * MARK_BYTES),  # no room for the mark: plain cut
        ("a\x00b", 10, "a\ufffdb"),  # PostgreSQL cannot store NUL in text
        ("file \udcff name", 100, "file \ufffd name"),  # surrogateescape leftovers
    ],
)
def test_examples(text: str, limit: int, stored: str) -> None:
    assert truncate_for_storage(text, limit) == stored


def test_default_limit_is_2048_bytes() -> None:
    stored = truncate_for_storage("€" * 5000)
    assert len(stored.encode()) <= 2048
    assert len(stored.encode()) > 2048 - 3 - MARK_BYTES


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        truncate_for_storage("x", -1)
