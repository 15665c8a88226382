"""Open-answer normalisation: each documented step, the accepted-answer check and how records are compared."""

import pytest

from laya_robustness.answers import is_accepted, normalize_answer


@pytest.mark.parametrize("raw, expected", [
    ("Yes", "yes"), ("YES", "yes"), ("  yes  ", "yes"),                   # case and outer spaces
    ("new   york\tcity", "new york city"),                                 # inner whitespace runs
    ("no.", "no"), ("no...", "no"), ("Stop!?", "stop"), ("2 , ", "2"),     # trailing punctuation
    ("3.5", "3.5"), ("e.g. 5", "e.g. 5"), ("U.S.A.", "u.s.a"),             # inner dots kept
    ('"Yes."', "yes"), ("'no'", "no"), ("\u201cMaybe\u201d", "maybe"),    # one pair of quotes
    ("\u2018the end\u2019.", "end"),
    ("the red car", "red car"), ("An apple", "apple"), ("a dog", "dog"),  # a leading article
    ("A", "a"), ("the", "the"), ("theatre", "theatre"),                   # ... only before more words
    ("\uff21\uff22\uff23", "abc"), ("caf\u00e9", "caf\u00e9"),            # NFKC
    ("", ""), ("?", ""),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_normalisation_is_idempotent():
    for raw in ("  The  Red Car. ", '"Yes."', "e.g. 5!", "A", "\u2018the end\u2019."):
        once = normalize_answer(raw)
        assert normalize_answer(once) == once


def test_is_accepted():
    assert is_accepted("The Eiffel Tower.", ["eiffel tower"])
    assert is_accepted("YES", ("no", "Yes"))
    assert not is_accepted("3.5", ["3", "5"])
    assert not is_accepted("yes", [])
    with pytest.raises(TypeError, match="list of strings"):
        is_accepted("yes", "yes")
    with pytest.raises(TypeError, match="must be a string"):
        normalize_answer(3)

