"""The SQLite search's ``holds`` (whether a message holds every searched word, without
reading all of its words) answers exactly what the shared ``matches`` answers."""

from __future__ import annotations

import random
import string

from agentledger.storage.search import matches, terms_of
from agentledger.storage.sqlite.search import holds

_LETTERS = string.printable + "éÉßİıﬁ٣²_-\u2013ǅ\u0301"


def test_holds_answers_what_matches_answers() -> None:
    chance = random.Random(44)
    texts = ["", "Order order-1182 e@x.com foo_bar", "wörld ÉTÉ naïve-1 İstanbul ﬁne ²"]
    texts += [
        "".join(chance.choice(_LETTERS) for _ in range(chance.randint(0, 40))) for _ in range(3000)
    ]
    words = [w for text in texts for w in terms_of(text)] + ["order", "1182", "e", "x"]
    for text in texts:
        inside = terms_of(text)
        for terms in (
            inside[:1],
            inside[:3],
            [chance.choice(words)],
            [chance.choice(words), chance.choice(words)],
            [w[1:] for w in inside[:2] if len(w) > 1],  # pieces of words: no match
        ):
            if terms:
                assert holds(terms, text) == matches(terms, text), (terms, text)
