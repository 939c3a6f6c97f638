"""``words_of`` (what PostgreSQL indexes of a message) reads ASCII text without the regular
expression: the same words as the expression reads, for any text; a search's cursor."""

from __future__ import annotations

import random
import string

import pytest

from agentledger.errors import ValidationError
from agentledger.storage.cursor import encode_key_cursor
from agentledger.storage.postgres.search import lexemes_of, tsquery_of
from agentledger.storage.search import search_query, terms_of, words_of


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


def test_lexemes_of_leaves_out_words_postgresql_does_not_keep() -> None:
    long = "x" * 2047
    assert lexemes_of(f"Order order {long} 1182 {'é' * 1023} {'é' * 1024}") == (
        f"order 1182 {'é' * 1023}"
    )
    assert tsquery_of(["order", "1182"]) == "'order' & '1182'"


def test_lexemes_of_reads_the_words_words_of_reads() -> None:
    """Its ASCII fast path reads the words every backend reads, each once, in order."""
    chance = random.Random(45)
    texts = ["", "Hello, World-1182 foo_bar e@x.com\t\n", f"a {'y' * 2046} {'z' * 2047} b"]
    texts += [
        "".join(chance.choice(string.printable) for _ in range(chance.randint(0, 80)))
        for _ in range(2000)
    ]
    for text in texts:
        words = [w for w in dict.fromkeys(words_of(text).split()) if len(w.encode()) <= 2046]
        assert lexemes_of(text) == " ".join(words)


def test_a_cursor_of_the_index_before_the_records_own_words_is_refused() -> None:
    """A cursor issued before the index moved onto the records (its positions were one row
    per message) is refused with a ValidationError, not read as a position of today's."""
    first = search_query("refund", None, None, "", 20)
    old = encode_key_cursor("search", first.scope_id, ("41",))
    with pytest.raises(ValidationError, match="cursor"):
        search_query("refund", None, None, old, 20)
    today = encode_key_cursor("search.records", first.scope_id, ("41",))
    assert search_query("refund", None, None, today, 20).before == 41
