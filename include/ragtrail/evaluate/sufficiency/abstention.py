"""Whether an answer is an abstention ("I don't know") rather than an attempt at an answer.

An answer abstains when a structured reply says so (its ``abstain`` flag), when it is empty, or
when *every* sentence of it is an abstention phrase. Each sentence is matched as a whole: an
optional opener ("Sorry,", "Unfortunately,", "Based on the passages,"), one phrase of
:data:`ABSTENTION_PATTERNS`, and an optional closer ("from the given context", "for sure"). So
"I don't know." and "Sorry, the context does not mention it." abstain, while "I don't know why
it changed, but the answer is 27 days" and "I'm not sure, but I think 27 days" are answers (a
hedged answer is still an answer and can be wrong).
"""

from __future__ import annotations

import re

from ragtrail.evaluate.attribution.cited_answers import split_sentences

_NOT = r"(?:do not|don'?t|does not|doesn'?t|did not|didn'?t)"
_CANNOT = (
    r"(?:can ?not|can'?t|could not|couldn'?t|am unable to|'?m unable to|am not able to|"
    r"'?m not able to|unable to|not able to|is not possible to|is impossible to)"
)
_SOURCE = (
    r"(?:the |this |these |given |provided )*"
    r"(?:context|passages?|documents?|text|information|sources?|excerpts?)"
    r"(?: (?:provided|given|above|available))?"
)
_FREE = r"(?:(?!\bbut\b)[^,;\d]){1,80}"
"""A few words with no clause after them (no comma, semicolon, "but") and no number."""
_TOPIC = rf"(?: (?:about|on|regarding|of|for) {_FREE})?"
"""What the missing information is about ("... about the leave policy")."""
_OBJECT = (
    r"(?: (?:this|that|it|anything|(?:the |an )?answer|"
    r"(?:the|any|a|an|this|that|these|those|such|enough|how|what|when|where|who|which|"
    rf"whether|why|if) {_FREE}))?"
)
"""What the source does not give: "it", "the leave policy", "how many days staff get"."""
_QUESTION = r"(?: (?:to )?(?:this|that|the|your) question)?"

ABSTENTION_PATTERNS: tuple[str, ...] = (
    # I don't know / I do not know the answer (to this question)
    rf"i (?:really |honestly |simply )?{_NOT} know(?: (?:the|an|that|this) answer)?{_QUESTION}",
    r"(?:(?:i have )?no (?:idea|clue)|i have no (?:information|answer))" + _TOPIC,
    # not sure / unsure / not certain
    r"(?:i'?m |i am )?(?:not sure|unsure|not certain|uncertain)" + _TOPIC,
    # I cannot answer / unable to answer / can't determine (this question)
    rf"(?:i |it )?{_CANNOT} (?:answer|determine|tell|say|know|find|be determined|be answered)"
    rf"(?: (?:this|that|it|(?:the |an )?answer))?{_QUESTION}{_TOPIC}",
    r"(?:this|that|the) question (?:can ?not|can'?t) be answered",
    # no answer (found / available / given)
    r"(?:there is )?no answer(?: (?:is )?(?:found|available|given|provided))?",
    # not enough / insufficient / no information (to answer)
    r"(?:there is |there'?s |i have )?(?:not enough|insufficient|no|too little) "
    r"(?:information|info|context|data|evidence|details)"
    r"(?: (?:is )?(?:given|provided|available))?"
    rf"(?: to (?:answer|determine|tell|say)(?: (?:this|that|it))?{_QUESTION})?{_TOPIC}",
    # the context does not say / mention / provide (it / the answer / information about X)
    rf"{_SOURCE} {_NOT} (?:say|mention|provide|contain|include|specify|state|answer|give|"
    r"cover|tell|discuss|address)" + _OBJECT + _TOPIC,
    # (it is) not mentioned / not specified / not stated (in the context)
    r"(?:it is |it'?s |this is |that is |the answer is )?"
    r"not (?:mentioned|specified|stated|given|provided|known|available|found|answered)",
    # unknown / unclear / N/A / cannot be determined
    r"(?:it is |it'?s |this is |the answer is )?(?:unknown|unclear|n/?a|not applicable)",
    # an explicit abstention word
    r"(?:i )?abstain",
)
"""The abstention phrases, as regular expressions over a normalised sentence (lower case, single
spaces, straight apostrophes, no end punctuation). Each must match a whole sentence, with only
the fillers of :data:`ABSTENTION_OPENERS` and :data:`ABSTENTION_CLOSERS` around it."""

ABSTENTION_OPENERS: tuple[str, ...] = (
    r"(?:i'?m |i am )?(?:so |very |really )?sorry",
    r"unfortunately",
    r"(?:i'?m|i am) afraid",
    r"apologies",
    r"well",
    r"hmm+",
    r"honestly",
    rf"(?:based on|from|according to|given|in) {_SOURCE}",
)
"""Words a model puts before an abstention phrase, each followed by an optional comma."""

ABSTENTION_CLOSERS: tuple[str, ...] = (
    rf"(?:based on|from|in|given|according to|with) {_SOURCE}",
    r"from what i know",
    r"for (?:sure|certain)",
    r"(?:yet|sorry|at this time|at the moment)",
)
"""Words a model puts after an abstention phrase."""

_OPENER = "(?:(?:" + "|".join(ABSTENTION_OPENERS) + r"),? )*"
_CLOSER = "(?:,? (?:" + "|".join(ABSTENTION_CLOSERS) + "))*"
_SENTENCE_RE = re.compile(rf"{_OPENER}(?:{'|'.join(ABSTENTION_PATTERNS)}){_CLOSER}", re.IGNORECASE)
_FILLER_RE = re.compile(rf"(?:{'|'.join(ABSTENTION_OPENERS)})", re.IGNORECASE)
_EDGE_PUNCT = " \t\n.!?,;:\"'`*()[]{}-"


def _normalise(sentence: str) -> str:
    text = sentence.replace("\u2019", "'").replace("\u2018", "'").casefold()
    return " ".join(text.split()).strip(_EDGE_PUNCT)


def _abstains(sentence: str) -> bool:
    text = _normalise(sentence)
    if not text:
        return True
    return bool(_SENTENCE_RE.fullmatch(text) or _FILLER_RE.fullmatch(text))


def is_abstention(text: str, abstain_flag: bool | None = None) -> bool:
    """True when the reply abstains (see the module docstring).

    ``abstain_flag``: the explicit abstain field of a structured reply; ``True`` decides, whatever
    the text. ``False`` or ``None`` leave it to the text: a reply that says "I don't know" abstains
    even when its flag says otherwise.
    """
    if abstain_flag:
        return True
    sentences = split_sentences(text)
    return all(_abstains(s) for s in sentences)  # no sentence at all: an empty reply


__all__ = ["ABSTENTION_CLOSERS", "ABSTENTION_OPENERS", "ABSTENTION_PATTERNS", "is_abstention"]
