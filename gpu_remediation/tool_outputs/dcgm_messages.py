"""DCGM error id of a message, recognised by DCGM's own message templates.

``dcgmi health -j`` prints an incident's message but not its error id. Every
``_MSG`` template of ``dcgm_errors.h`` (``gpu_remediation.dcgm_errors``) is
turned into a matcher: its printf conversions match any text, its literal words
must all be there in order. dcgmi splits long messages into ``overflow`` chunks
and may drop a punctuation mark at a split (``Health.cpp``, ``AddErrorMessage``),
so case, punctuation and spacing are ignored. The most specific template (the
most literal text) wins: "Detected XID 48 for GPU 2" is ``XID_ERROR`` (101),
not the shorter "Detected %ld %s for GPU %u" (102).

Matching is linear in the message's length (issue 35): a template's literal
pieces are searched one after the other, each from where the previous one
ended, instead of as one regex with a ``.*?`` between the pieces, whose
backtracking tried every split of the message among the gaps (a 1 KB message
could take minutes). The message is also cut to :data:`MAX_MATCHED_MESSAGE`
characters first.
"""

from __future__ import annotations

import re

from gpu_remediation.dcgm_errors import DCGM_ERROR_META

__all__ = ["MAX_MATCHED_MESSAGE", "message_error_id"]

MAX_MATCHED_MESSAGE = 16 * 1024
"""Characters of a message matched against the templates; the rest is not looked at.

DCGM formats a health incident into a 1024-byte buffer (``dcgmDiagErrorDetail_t.msg``,
``snprintf`` in ``DcgmHealthWatch::SetResponse``), and dcgmi joins the incidents
of one system of one GPU with ", " into one message (``Health.cpp``,
``AppendSystemIncidents``). A real incident runs to a few hundred characters
(the longest template is 140 before its arguments and its advice), so 16 KiB
holds 16 incidents even at the buffer's full length and far more real ones: no
message DCGM writes for one system of a GPU is cut. Text beyond it is not
DCGM's, and the cap bounds what matching costs whatever the text holds (a few
milliseconds for 16 KiB of the worst text).
"""

_CONVERSION = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
# Templates with less literal text than this say too little to name an id.
_MIN_LITERAL = 14


def _normalise(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())


class _Template:
    """One template's literal pieces, each a regex with no repetition but optional spaces.

    The pieces must appear in order; between two of them (where a printf
    conversion stood) any text may come. When the template starts with
    literal text, its first piece must start a word.
    """

    def __init__(
        self, error_id: int, literal: int, pieces: list[re.Pattern[str]], word_start: bool
    ) -> None:
        self.error_id = error_id
        self.literal = literal
        self.pieces = pieces
        self.word_start = word_start

    def matches(self, text: str) -> bool:
        """Whether ``text`` (normalised) was formatted from this template.

        Each piece is searched from where the previous one ended, at its
        leftmost place. That is a match exactly when the old single regex
        (the pieces joined by ``.*?``) matched: a piece's occurrences end in
        the order they start (its letters are fixed, only the single spaces
        between its words are optional), so the leftmost one leaves the most
        text for the pieces after it, and no other choice needs trying. Each
        piece is one pass over the rest of ``text``: the time is linear in its
        length, times the (constant) number and length of pieces.
        """
        position = 0
        for index, piece in enumerate(self.pieces):
            found = piece.search(text, position)
            if index == 0 and self.word_start:
                # The word-start test is made here, not as a lookbehind in the
                # regex: a pattern that starts with literal text is searched
                # for by that text, many times faster. Each retry starts one
                # character further, so every position is still tried once.
                # (Normalised text is letters, digits and single spaces.)
                while found is not None and found.start() > 0 and text[found.start() - 1] != " ":
                    found = piece.search(text, found.start() + 1)
            if found is None:
                return False
            position = found.end()
        return True


def _template(error_id: int, template: str) -> _Template | None:
    pieces = [_normalise(p) for p in _CONVERSION.split(template.replace("%%", "%"))]
    literal = sum(len(p) for p in pieces)
    if literal < _MIN_LITERAL:
        return None
    compiled = [
        # Two conversions in a row leave an empty piece: nothing to look for.
        re.compile(r"\s*".join(re.escape(word) for word in piece.split(" ")))
        for piece in pieces
        if piece
    ]
    # Only literal text that opens the template must start a word: after a
    # conversion the next literal text may follow the argument directly ("%dX").
    return _Template(error_id, literal, compiled, word_start=bool(pieces[0]))


def _build() -> tuple[_Template, ...]:
    found = [
        template
        for error_id, meta in DCGM_ERROR_META.items()
        if error_id > 0 and (template := _template(error_id, meta.message)) is not None
    ]
    found.sort(key=lambda t: (-t.literal, t.error_id))
    return tuple(found)


_TEMPLATES = _build()


def message_error_id(message: str) -> int | None:
    """Return the DCGM error id whose template ``message`` was formatted from, if any.

    Only the first :data:`MAX_MATCHED_MESSAGE` characters are read.
    """
    text = _normalise(message[:MAX_MATCHED_MESSAGE])
    for template in _TEMPLATES:
        if template.matches(text):
            return template.error_id
    return None
