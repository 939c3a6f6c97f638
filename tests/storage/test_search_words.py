"""``words_of`` (what PostgreSQL indexes of a message) reads ASCII text without the regular
expression: the same words as the expression reads, for any text."""

from __future__ import annotations

import random
import string

from agentledger.storage.search import terms_of, words_of


def test_words_of_reads_the_words_terms_of_reads() -> None:
    chance = random.Random(44)
    texts = ["", "  ", "Hello, World-1182 foo_bar e@x.com\t\n", "wörld ÉTÉ naïve-1"]
    texts += [
        "".join(chance.choice(string.printable) for _ in range(chance.randint(0, 60)))
        for _ in range(2000)
    ]
    for text in texts:
        words = words_of(text).split(" ") if words_of(text) else []
        assert list(dict.fromkeys(words)) == terms_of(text), text
        assert words_of(text) == " ".join(words)
