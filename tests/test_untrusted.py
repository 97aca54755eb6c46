"""clean() and fence(): a candidate's text made safe to print."""

from __future__ import annotations

from coevolve.base.untrusted import FENCE, clean, fence


def test_clean_removes_escape_sequences_and_controls_but_keeps_lines():
    text = "\x1b[2J\x1b[1;31mred\x1b[0m\x1b]0;title\x07 tab\there\r\nnext\x00\x7f\x9b2K\u202eevil"
    assert clean(text) == "red tab\there\nnextevil"


def test_clean_cuts_to_the_tail_with_a_marker():
    assert clean("abcdefghij", limit=4) == "…hij"


def test_fence_quotes_every_line():
    fenced = fence("    50   1.0000\n\x1b[1Atotal 0.1 s")
    assert fenced.splitlines() == [FENCE + "    50   1.0000", FENCE + "total 0.1 s"]
    assert fence("") == FENCE.rstrip()
