"""Caption variants for language-guided invariance probing: paraphrases, semantic flips, and both.

Every builder is pure, ``(rows, seed) -> variant rows``, over caption rows (``loaders.captions``);
each variant replaces the caption (``options[0]``), keeps group and cluster, and records
what it did in ``meta``. A rule that does not apply produces no row.

``lgip_paraphrase`` (meaning kept; ``meta``: ``rule``, ``kind``). Wrappers (kind ``wrapper``):

- ``photo_of``: "a photo of <caption>"; ``image_showing``: "an image showing <caption>"; both only
  for a noun-phrase caption (no finite verb from ``FINITE_VERBS``, not starting with "there").
- ``in_this_picture``: "in this picture, <caption>"; not when the caption already names a
  picture, photo or image.

Rewrites (kind ``rewrite``):

- ``synonym``: every word of ``SYNONYMS`` replaced by its synonym (number words by digits,
  "above" -> "over", "picture" -> "image", "man" -> "guy", ...).
- ``passive``: "<the picture> shows|depicts|contains <X>" -> "<X> is|are shown|depicted|contained
  in <the picture>"; "<subject> [is|are] <verb>ing <object> [<rest>]" -> "<object> [is|are] being
  <participle> by <subject> [<rest>]" for the verbs of ``PARTICIPLES``, when subject and object
  are short noun phrases (a determiner and 1-3 words) and the rest starts with a preposition.
- ``reorder_relation``: "<A> above|below|to the left of|to the right of|next to|beside <B>" ->
  "<B> <converse> <A>", when A and B are short noun phrases that end in a known noun (``NOUNS``).
- ``reorder_list``: a list of 2+ short noun phrases that end in a known noun ("A, B and C"),
  alone or after "the picture shows " / "there is|are ", in reverse order ("C, B and A";
  "there is|are" agrees with the new first phrase).

User paraphrases (kind ``user``, rule ``user_<k>``): texts given per row id in a JSONL file
(``loaders.variant_files.load_paraphrases``), passed to :func:`build_paraphrases`.

``lgip_flip`` (meaning contradicted; ``meta``: ``attribute``, ``strength``, ``from``, ``to``):
one substitution of a colour word, an object word or a count, which must contradict the image.

- With scene facts (``meta["objects"]``, the fixture captions): the flipped caption is parsed
  (``captions.parse_mentions`` grammar) and must be false of the scene (``captions.caption_holds``).
  ``colour``: a colour word -> another fixture colour; ``weak`` if that colour is present
  elsewhere in the image, ``strong`` if absent. ``object``: a shape noun -> another shape (number
  kept); ``weak`` if that shape is present elsewhere, ``strong`` if absent. ``count``: the
  determiner -> another count 1..10 (the noun's number, and a leading "there is|are", follow);
  ``weak`` off by one, ``medium`` off by two, ``strong`` off by three (further is not used).
- Without scene facts (COCO captions): word lists. ``colour``: ``COLOUR_WORDS`` (not "orange",
  which is also a fruit) -> another colour word; ``object``: the one-word COCO categories and a few
  person words (``OBJECT_CATEGORIES``) -> another one, singular or plural as the original. The new
  word (either spelling of grey, either number of an object, or its ``SYNONYMS`` entry) must
  appear in no caption of the same image (the builder's rows of that cluster), so it contradicts
  what every annotator saw. ``weak``: a similar colour (``SIMILAR_COLOURS``) or the same
  COCO supercategory; ``strong``: otherwise. ``count``: a number word two..ten -> another one, graded
  by distance as above ("a" and "one" are not flipped: the noun's number would change).

One flip per (attribute, strength) bucket and caption, picked with
``keyed_rng(seed, "lgip_flip", row_id, attribute, strength)``; variant ``<attribute>_<strength>``.

``lgip_combined``: one paraphrase rule per caption, picked with ``keyed_rng(seed,
"lgip_combined", row_id)`` among the wrappers and rewrites that apply, gives variant
``paraphrase`` (``meta``: ``role="paraphrase"``, ``rule``); the same rule applied to each of the
caption's ``lgip_flip`` flips gives variant ``<attribute>_<strength>`` (``meta``: ``role="flip"``,
``reference="paraphrase"``, ``rule`` and the flip's keys), so a flip is judged against the
paraphrase of the true caption.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from laya_robustness.families.lgip.grammar import (
    NUMBER_WORDS,
    RELATIONS,
    caption_holds,
    determiner_for,
    noun_for,
    parse_mentions,
)
from laya_robustness.metrics.lgip import ATTRIBUTES, FAMILY_COMBINED, FAMILY_FLIP, FAMILY_PARAPHRASE, STRENGTHS
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row
from laya_robustness.scenes import COLOURS, SHAPES

MAX_COUNT_OFFSET = 3

DETERMINERS = ("a", "an", "the", "this", "some", "many", "several") + NUMBER_WORDS[1:]
FINITE_VERBS = frozenset({"is", "are", "was", "were", "shows", "show", "depicts", "depict", "contains", "contain",
                          "has", "have", "sits", "sit", "stands", "stand", "lies", "lie", "looks", "look"})
PICTURE_WORDS = frozenset({"picture", "photo", "image", "photograph", "pic"})
PREPOSITIONS = frozenset({"on", "in", "at", "with", "near", "next", "by", "under", "over", "down", "across", "along",
                          "through", "while", "into", "onto", "from", "behind", "beside", "during", "for", "inside",
                          "outside", "around", "past", "toward", "towards", "up", "off", "out"})

SYNONYMS = {
    **{w: str(i) for i, w in enumerate(NUMBER_WORDS) if i >= 2},
    "above": "over", "below": "beneath", "picture": "image", "photo": "picture", "shows": "depicts",
    "man": "guy", "men": "guys", "woman": "lady", "women": "ladies", "kid": "child", "kids": "children",
    "large": "big", "big": "large", "small": "little", "little": "small", "couch": "sofa", "sofa": "couch",
    "bike": "bicycle", "bicycle": "bike", "airplane": "plane", "plane": "airplane", "street": "road",
    "road": "street", "television": "tv", "photograph": "picture", "beside": "next to",
}
#: Present participle -> past participle, for the passive rule.
PARTICIPLES = {
    "riding": "ridden", "holding": "held", "eating": "eaten", "carrying": "carried", "throwing": "thrown",
    "catching": "caught", "pulling": "pulled", "pushing": "pushed", "watching": "watched", "flying": "flown",
    "hitting": "hit", "chasing": "chased", "cutting": "cut", "using": "used", "wearing": "worn",
    "driving": "driven", "petting": "petted", "feeding": "fed", "walking": "walked", "swinging": "swung",
    "reading": "read", "preparing": "prepared", "taking": "taken", "playing": "played", "kicking": "kicked",
    "grazing": "grazed", "brushing": "brushed", "hugging": "hugged",
}
#: Verb of a "<the picture> <verb> <X>" caption -> (past participle, preposition) of its passive.
SHOW_VERBS = {"shows": ("shown", "in"), "depicts": ("depicted", "in"), "contains": ("contained", "in")}
RELATION_CONVERSES = {**RELATIONS, "next to": "next to", "beside": "beside"}

COLOUR_WORDS = ("red", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "gray", "grey",
                "silver")
#: Pairs of colour words graded as a weak (similar) flip in word-list mode.
SIMILAR_COLOURS = frozenset(frozenset(p) for p in (
    ("red", "pink"), ("red", "purple"), ("red", "brown"), ("pink", "purple"), ("blue", "purple"),
    ("yellow", "brown"), ("black", "gray"), ("black", "grey"), ("white", "gray"), ("white", "grey"),
    ("white", "silver"), ("gray", "silver"), ("grey", "silver"), ("blue", "green")))
#: Spellings of one colour: never a flip of each other.
SAME_COLOUR = {"grey": "gray"}
#: One-word COCO categories (and person words) by COCO supercategory: singular -> plural.
OBJECT_CATEGORIES = {
    "person": {"person": "people", "man": "men", "woman": "women", "boy": "boys", "girl": "girls",
               "child": "children"},
    "vehicle": {"bicycle": "bicycles", "car": "cars", "motorcycle": "motorcycles", "airplane": "airplanes",
                "bus": "buses", "train": "trains", "truck": "trucks", "boat": "boats"},
    "outdoor": {"bench": "benches"},
    "animal": {"bird": "birds", "cat": "cats", "dog": "dogs", "horse": "horses", "sheep": "sheep", "cow": "cows",
               "elephant": "elephants", "bear": "bears", "zebra": "zebras", "giraffe": "giraffes"},
    "accessory": {"backpack": "backpacks", "umbrella": "umbrellas", "handbag": "handbags", "tie": "ties",
                  "suitcase": "suitcases"},
    "sports": {"frisbee": "frisbees", "skis": "skis", "snowboard": "snowboards", "kite": "kites",
               "skateboard": "skateboards", "surfboard": "surfboards"},
    "kitchen": {"bottle": "bottles", "cup": "cups", "fork": "forks", "knife": "knives", "spoon": "spoons",
                "bowl": "bowls"},
    "food": {"banana": "bananas", "apple": "apples", "sandwich": "sandwiches", "broccoli": "broccoli",
             "carrot": "carrots", "pizza": "pizzas", "donut": "donuts", "cake": "cakes"},
    "furniture": {"chair": "chairs", "couch": "couches", "bed": "beds", "toilet": "toilets"},
    "electronic": {"tv": "tvs", "laptop": "laptops", "mouse": "mice", "remote": "remotes", "keyboard": "keyboards"},
    "appliance": {"microwave": "microwaves", "oven": "ovens", "toaster": "toasters", "sink": "sinks",
                  "refrigerator": "refrigerators"},
    "indoor": {"book": "books", "clock": "clocks", "vase": "vases", "scissors": "scissors",
               "toothbrush": "toothbrushes"},
}

#: Nouns a reordered noun phrase may end in: the fixture shapes, the object words, common COCO nouns.
NOUNS = frozenset(
    [w for s in SHAPES + ("shape",) for w in (s, s + "s")]
    + [w for forms in OBJECT_CATEGORIES.values() for pair in forms.items() for w in pair]
    + "table tables plate plates street road field room kitchen bathroom building buildings tree trees "
      "wall window sky water beach ocean wave grass park plane kite player skier surfer guy lady".split())

_WORD = re.compile(r"[A-Za-z]+")
_TRAILING = re.compile(r"[\s.!?]*$")
Rule = Callable[[str], "str | None"]


# -- text helpers -------------------------------------------------------------------------------


def _split_end(text: str) -> tuple[str, str]:
    """(body, trailing punctuation) of a caption, body stripped."""
    end = _TRAILING.search(text).group(0)
    return text[: len(text) - len(end)].strip(), end.strip()


def _match_case(word: str, like: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _lower_first(text: str) -> str:
    """The first word lower-cased when it is a determiner (so it can follow another phrase)."""
    first = text.split(" ", 1)[0]
    return first.lower() + text[len(first):] if first.lower() in DETERMINERS else text


def _finish(body: str, like: str, end: str) -> str:
    """Capitalise like the original caption's first letter and put its final punctuation back."""
    return _match_case(body, like) + end


def is_noun_phrase(text: str) -> bool:
    """Whether a caption reads as a noun phrase: no finite verb of ``FINITE_VERBS``, not "there ..."."""
    words = [w.lower() for w in _WORD.findall(text)]
    return bool(words) and words[0] != "there" and not FINITE_VERBS.intersection(words)


def is_short_np(text: str) -> bool:
    """A determiner followed by 1-3 words, none a finite verb, a preposition or an -ing verb."""
    words = [w.lower() for w in text.split()]
    return (2 <= len(words) <= 4 and words[0] in DETERMINERS and all(w.isalpha() for w in words)
            and not any(w in FINITE_VERBS or w in PREPOSITIONS or w.endswith("ing") for w in words[1:]))


def _ends_in_noun(text: str) -> bool:
    return is_short_np(text) and text.split()[-1].lower() in NOUNS


def _plural_np(text: str) -> bool:
    words = [w.lower() for w in text.split()]
    if "and" in words or "," in text:
        return True
    return bool(words) and (words[0] in NUMBER_WORDS[2:] or words[0] in ("some", "many", "several")
                            or words[0].isdigit() and int(words[0]) > 1)


# -- paraphrase rules ---------------------------------------------------------------------------


def _wrapper(prefix: str, needs_noun_phrase: bool) -> Rule:
    def rule(text: str) -> str | None:
        body, end = _split_end(text)
        if not body or (needs_noun_phrase and not is_noun_phrase(body)):
            return None
        if not needs_noun_phrase and PICTURE_WORDS.intersection(w.lower() for w in _WORD.findall(body)):
            return None
        return _finish(prefix + _lower_first(body), text, end)

    return rule


def synonym(text: str) -> str | None:
    """Every word of ``SYNONYMS`` replaced (its capitalisation kept); None if none occurs.

    >>> synonym("Two dogs above a bike")
    '2 dogs over a bicycle'
    """
    out = _WORD.sub(lambda m: _match_case(SYNONYMS.get(m.group(0).lower(), m.group(0)), m.group(0)), text)
    return out if out != text else None


def passive(text: str) -> str | None:
    """The caption in the passive voice (see the module docstring), or None."""
    body, end = _split_end(text)
    words = body.split(" ")
    lower = [w.lower() for w in words]
    for i, w in enumerate(lower):
        if w in SHOW_VERBS and 2 <= i <= 3 and lower[0] in DETERMINERS and lower[i - 1] in PICTURE_WORDS:
            obj, subj = " ".join(words[i + 1:]), _lower_first(" ".join(words[:i]))
            if not obj:
                return None
            participle, prep = SHOW_VERBS[w]
            aux = "are" if _plural_np(obj) else "is"
            return _finish(f"{_lower_first(obj)} {aux} {participle} {prep} {subj}", text, end)
    for i, w in enumerate(lower):
        if w not in PARTICIPLES:
            continue
        aux = lower[i - 1] if i >= 1 and lower[i - 1] in ("is", "are") else None
        subj = " ".join(words[: i - 1 if aux else i])
        j = next((k for k in range(i + 1, len(words)) if lower[k] in PREPOSITIONS), len(words))
        obj, rest = " ".join(words[i + 1:j]), " ".join(words[j:])
        if not (is_short_np(subj) and is_short_np(obj)):
            return None
        verb = f"{'are' if _plural_np(obj) else 'is'} being" if aux else "being"
        out = f"{_lower_first(obj)} {verb} {PARTICIPLES[w]} by {_lower_first(subj)}"
        return _finish(out + (f" {rest}" if rest else ""), text, end)
    return None


def reorder_relation(text: str) -> str | None:
    """"<A> <relation> <B>" -> "<B> <converse> <A>" for short noun phrases A and B, or None."""
    body, end = _split_end(text)
    lower = body.lower()
    for phrase in sorted(RELATION_CONVERSES, key=len, reverse=True):
        k = lower.find(f" {phrase} ")
        if k < 0:
            continue
        a, b = body[:k], body[k + len(phrase) + 2:]
        if _ends_in_noun(a) and _ends_in_noun(b):
            return _finish(f"{_lower_first(b)} {RELATION_CONVERSES[phrase]} {_lower_first(a)}", text, end)
        return None
    return None


_LIST_LEADS = ("the picture shows ", "there is ", "there are ")


def reorder_list(text: str) -> str | None:
    """A list of 2+ short noun phrases in reverse order (see the module docstring), or None."""
    body, end = _split_end(text)
    lead = next((p for p in _LIST_LEADS if body.lower().startswith(p)), "")
    rest = body[len(lead):]
    head, sep, last = rest.rpartition(" and ")
    if not sep:
        return None
    items = [p.strip() for p in head.split(",")] + [last.strip()]
    if not all(_ends_in_noun(p) for p in items):
        return None
    items = [_lower_first(p) for p in reversed(items)]
    joined = ", ".join(items[:-1]) + " and " + items[-1]
    if lead.startswith("there"):
        lead = "there are " if _plural_np(items[0]) else "there is "
    elif lead:
        lead = body[:len(lead)]
    return _finish(lead + joined, text, end)


WRAPPER_RULES: dict[str, Rule] = {
    "photo_of": _wrapper("a photo of ", True),
    "image_showing": _wrapper("an image showing ", True),
    "in_this_picture": _wrapper("in this picture, ", False),
}
REWRITE_RULES: dict[str, Rule] = {
    "synonym": synonym, "passive": passive, "reorder_relation": reorder_relation, "reorder_list": reorder_list,
}
PARAPHRASE_RULES: dict[str, Rule] = {**WRAPPER_RULES, **REWRITE_RULES}


def rule_kind(rule: str) -> str:
    """``wrapper``, ``rewrite`` or ``user`` (``user_<k>``)."""
    if rule in WRAPPER_RULES:
        return "wrapper"
    if rule in REWRITE_RULES:
        return "rewrite"
    if rule.startswith("user_"):
        return "user"
    raise KeyError(f"unknown paraphrase rule {rule!r} (known: {', '.join(PARAPHRASE_RULES)}, user_<k>)")


def paraphrases(text: str) -> dict[str, str]:
    """Every built-in rule that applies to ``text`` and changes it: rule name -> paraphrase."""
    out = {}
    for name, rule in PARAPHRASE_RULES.items():
        new = rule(text)
        if new is not None and new != text:
            out[name] = new
    return out


def _caption(row: Row) -> str:
    if row.primitive != "score" or len(row.options) != 1:
        raise ValueError(f"row {row.row_id} ({row.dataset}) is not a caption row (primitive 'score', one option)")
    return row.options[0]


def build_paraphrases(rows: Sequence[Row], seed: int, user: Mapping[str, Sequence[str]] | None = None) -> list[Row]:
    """``lgip_paraphrase`` variants: every applicable rule per caption, then the user's paraphrases
    of that row id (``user_<k>``; ids not among ``rows`` are ignored). The rules use no randomness."""
    out = []
    for row in rows:
        text = _caption(row)
        for rule, new in paraphrases(text).items():
            out.append(row.derive(FAMILY_PARAPHRASE, rule, options=(new,), meta={"rule": rule, "kind": "wrapper"
                                  if rule in WRAPPER_RULES else "rewrite"}))
        for k, new in enumerate((user or {}).get(row.row_id, ())):
            rule = f"user_{k}"
            out.append(row.derive(FAMILY_PARAPHRASE, rule, options=(new,), meta={"rule": rule, "kind": "user"}))
    return out


# -- semantic flips -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Flip:
    """One contradicting substitution: the new caption, its attribute and strength, the words swapped."""

    text: str
    attribute: str
    strength: str
    source: str
    target: str

    def meta(self) -> dict:
        return {"attribute": self.attribute, "strength": self.strength, "from": self.source, "to": self.target}


def count_strength(offset: int) -> str:
    """``weak`` for a count off by one, ``medium`` off by two, ``strong`` off by three or more.

    >>> [count_strength(d) for d in (1, -2, 3, 7)]
    ['weak', 'medium', 'strong', 'strong']
    """
    offset = abs(offset)
    if offset < 1:
        raise ValueError("a count flip changes the count")
    return STRENGTHS[min(offset, 3) - 1]


_ARTICLE_BEFORE = re.compile(r"\b(a|an)(\s+)$", re.IGNORECASE)


def _replace(text: str, span: tuple[int, int], word: str) -> str:
    """``text`` with ``span`` replaced by ``word`` (its case kept); an "a"/"an" right before it follows the new word."""
    head = text[:span[0]]
    article = _ARTICLE_BEFORE.search(head)
    if article:
        new = "an" if word[:1].lower() in "aeiou" else "a"
        head = head[:article.start(1)] + _match_case(new, article.group(1)) + article.group(2)
    return head + _match_case(word, text[span[0]:span[1]]) + text[span[1]:]


_THERE = re.compile(r"there\s+(is|are)\s", re.IGNORECASE)


def agree_there(text: str) -> str:
    """A leading "there is|are" made to agree with the count of the first mention."""
    m, mentions = _THERE.match(text), parse_mentions(text)
    if not m or not mentions:
        return text
    verb = _match_case("is" if mentions[0].count == 1 else "are", m.group(1))
    return text[:m.start(1)] + verb + text[m.end(1):]


def scene_flips(text: str, objects: Sequence[Mapping]) -> list[Flip]:
    """Every colour, object and count flip of a fixture-grammar caption that is false of the scene."""
    colours_present = {o["colour"] for o in objects}
    shapes_present = {o["shape"] for o in objects}
    candidates = []
    for m in parse_mentions(text):
        if m.colour_span is not None:
            for colour in COLOURS:
                if colour != m.colour:
                    strength = "weak" if colour in colours_present else "strong"
                    candidates.append(Flip(_replace(text, m.colour_span, colour), "colour", strength, m.colour, colour))
        if m.shape is not None:
            for shape in SHAPES:
                if shape != m.shape:
                    strength = "weak" if shape in shapes_present else "strong"
                    new = _replace(text, m.noun_span, noun_for(shape, m.count))
                    candidates.append(Flip(new, "object", strength, m.shape, shape))
        for count in range(max(1, m.count - MAX_COUNT_OFFSET), min(10, m.count + MAX_COUNT_OFFSET) + 1):
            if count == m.count:
                continue
            noun = _replace(text, m.noun_span, noun_for(m.shape, count))
            following = text[m.det_span[1]:].split()[0]
            new = agree_there(_replace(noun, m.det_span, determiner_for(count, following)))
            candidates.append(Flip(new, "count", count_strength(count - m.count),
                                   text[m.det_span[0]:m.det_span[1]].lower(), determiner_for(count, following)))
    return [f for f in candidates if not caption_holds(f.text, objects)]


_OBJECT_SUPER = {w: sup for sup, forms in OBJECT_CATEGORIES.items() for pair in forms.items() for w in pair}
_PLURAL = {s: p for forms in OBJECT_CATEGORIES.values() for s, p in forms.items()}
_SINGULAR = {p: s for s, p in _PLURAL.items()}


def word_list_flips(text: str, image_captions: Sequence[str]) -> list[Flip]:
    """Every colour, object and count flip of a caption by word lists; a new colour or object word
    must occur neither in ``text`` nor in ``image_captions`` (the other captions of the image)."""
    mentioned = {w.lower() for c in [text, *image_captions] for w in _WORD.findall(c)}
    mentioned |= {SYNONYMS[w] for w in mentioned if w in SYNONYMS}
    mentioned |= {SAME_COLOUR.get(w, w) for w in mentioned}
    candidates = []
    for m in _WORD.finditer(text):
        word, span = m.group(0).lower(), m.span()
        if word in COLOUR_WORDS:
            for colour in COLOUR_WORDS:
                if SAME_COLOUR.get(colour, colour) not in mentioned:
                    strength = "weak" if frozenset((word, colour)) in SIMILAR_COLOURS else "strong"
                    candidates.append(Flip(_replace(text, span, colour), "colour", strength, word, colour))
        elif word in _OBJECT_SUPER:
            plural = word in _SINGULAR and word not in _PLURAL
            for singular, plural_form in _PLURAL.items():
                target = plural_form if plural else singular
                if singular == _SINGULAR.get(word, word) or singular in mentioned or plural_form in mentioned:
                    continue
                strength = "weak" if _OBJECT_SUPER[singular] == _OBJECT_SUPER[word] else "strong"
                candidates.append(Flip(_replace(text, span, target), "object", strength, word, target))
        elif word in NUMBER_WORDS[2:]:
            n = NUMBER_WORDS.index(word)
            for count in range(max(2, n - MAX_COUNT_OFFSET), min(10, n + MAX_COUNT_OFFSET) + 1):
                if count != n:
                    candidates.append(Flip(_replace(text, span, NUMBER_WORDS[count]), "count",
                                           count_strength(count - n), word, NUMBER_WORDS[count]))
    return candidates


def flip_candidates(row: Row, image_captions: Sequence[str] = ()) -> list[Flip]:
    """The contradicting flips of a caption row: by its scene facts when ``meta["objects"]`` holds
    them, else by word lists against ``image_captions``."""
    text = _caption(row)
    if "objects" in row.meta:
        return scene_flips(text, row.meta["objects"])
    return word_list_flips(text, list(image_captions) or [text])


def _captions_by_cluster(rows: Sequence[Row]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(row.cluster, []).append(_caption(row))
    return out


def chosen_flips(row: Row, seed: int, image_captions: Sequence[str] = ()) -> list[Flip]:
    """One flip per (attribute, strength) bucket that has candidates, in ``ATTRIBUTES`` x ``STRENGTHS`` order."""
    buckets: dict[tuple[str, str], list[Flip]] = {}
    for flip in flip_candidates(row, image_captions):
        buckets.setdefault((flip.attribute, flip.strength), []).append(flip)
    out = []
    for attribute in ATTRIBUTES:
        for strength in STRENGTHS:
            pool = buckets.get((attribute, strength))
            if pool:
                out.append(pool[int(keyed_rng(seed, FAMILY_FLIP, row.row_id, attribute, strength).integers(len(pool)))])
    return out


def build_flips(rows: Sequence[Row], seed: int) -> list[Row]:
    """``lgip_flip`` variants: one contradicting flip per (attribute, strength) bucket and caption."""
    by_cluster = _captions_by_cluster(rows)
    out = []
    for row in rows:
        for flip in chosen_flips(row, seed, by_cluster[row.cluster]):
            out.append(row.derive(FAMILY_FLIP, f"{flip.attribute}_{flip.strength}", options=(flip.text,),
                                  meta=flip.meta()))
    return out


# -- paraphrase + flip ------------------------------------------------------------------------------


def build_combined(rows: Sequence[Row], seed: int) -> list[Row]:
    """``lgip_combined`` variants: a seeded paraphrase of each caption and the same rule applied to
    each of its ``lgip_flip`` flips (a flip the rule does not apply to, or leaves equal to the
    paraphrase, produces no row)."""
    by_cluster = _captions_by_cluster(rows)
    out = []
    for row in rows:
        text = _caption(row)
        applicable = paraphrases(text)
        if not applicable:
            continue
        names = sorted(applicable)
        rule = names[int(keyed_rng(seed, FAMILY_COMBINED, row.row_id).integers(len(names)))]
        reference = applicable[rule]
        out.append(row.derive(FAMILY_COMBINED, "paraphrase", options=(reference,),
                              meta={"role": "paraphrase", "rule": rule, "kind": rule_kind(rule)}))
        for flip in chosen_flips(row, seed, by_cluster[row.cluster]):
            new = PARAPHRASE_RULES[rule](flip.text)
            if new is None or new == reference:
                continue
            out.append(row.derive(FAMILY_COMBINED, f"{flip.attribute}_{flip.strength}", options=(new,),
                                  meta={"role": "flip", "reference": "paraphrase", "rule": rule, **flip.meta()}))
    return out

