"""The LangGraph store conformance kit: a pytest suite any ``BaseStore`` can run.

LangGraph ships a conformance package for checkpointers only; a store was
tested by hand. This kit checks the ``BaseStore`` contract as LangGraph's own
``InMemoryStore`` (the oracle) implements it; every case passes there, on
LangGraph's ``SqliteStore`` and on :class:`memrev.langgraph.MemrevStore`
(``tests/test_langgraph_kit.py`` runs all three, and MemrevStore on PostgreSQL).

Running it against a store: subclass :class:`StoreConformance` under a name
pytest collects and give the fixture ``make_store``, a factory of fresh, empty
stores (``make_store()`` or ``make_store(index=...)``) that closes what it made
at the end of the test::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            made = []
            def make(index=None):
                made.append(MyStore(tmp_path / f"s{len(made)}", index=index))
                return made[-1]
            yield make
            for store in made:
                store.close()

A store with ``a*`` twins adds :class:`AsyncConformance` to the bases (LangGraph's
sync ``SqliteStore`` has none), one with vector search :class:`IndexConformance`; one
with TTLs whose clock a test can move adds :class:`TTLConformance` and the
fixture ``make_ttl_store(ttl) -> (store, advance)`` (``advance(minutes)``
moves its clock). Cases are named by area: ``test_kit_names_*``,
``test_kit_items_*``, ``test_kit_batch_*``, ``test_kit_search_*``,
``test_kit_namespaces_*``, ``test_kit_index_*``, ``test_kit_ttl_*``,
``test_kit_concurrent_*``, ``test_kit_differential_*``. Async cases use
anyio's plugin (the class supplies ``anyio_backend``).

What is deliberately not checked, because the stores differ and LangGraph does
not specify it: the order of a search without a query (``InMemoryStore``:
insertion order; ``SqliteStore``: newest update first), ``created_at`` across
updates (``InMemoryStore`` resets it on every put), and namespaces that no
longer hold an item (``InMemoryStore`` still lists them, and lists one a ``get``
touched). The differential compares with the oracle up to exactly those.
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

__all__ = ["DIMS", "AsyncConformance", "IndexConformance", "StoreConformance", "TTLConformance", "letter_embed", "random_ops"]

HOSTILE_LABELS = [":", "/", "%", "%2F", " spaced ", "é☃", "items", "*", "a/b", "~", "x" * 60]
HOSTILE_KEYS = ["", ".", "..", "/", "%", "%2E", "a/b", "x.json", "k:1", "é☃", "\\", "y" * 200]
DIMS = 27


def letter_embed(texts: list[str]) -> list[list[float]]:
    """A scripted embedding, offline and deterministic: letter counts a-z plus one other."""
    out = []
    for text in texts:
        v = [0.0] * DIMS
        for ch in text.lower():
            v[ord(ch) - 97 if "a" <= ch <= "z" else 26] += 1.0
        out.append(v)
    return out


def _values(items: list[Any]) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((tuple(i.namespace), i.key, json.dumps(i.value, sort_keys=True)) for i in items)


class StoreConformance:
    """The contract every ``BaseStore`` keeps (see the module docstring for the hook)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def store(self, make_store: Callable[..., BaseStore]) -> BaseStore:
        return make_store()

    # ------------------------------------------------------------ names

    def test_kit_names_invalid_namespaces_raise_and_write_nothing(self, store: BaseStore) -> None:
        for bad in [(), ("a.b",), ("a", ""), ("langgraph", "x"), ("a\x00",)]:
            with pytest.raises(InvalidNamespaceError):
                store.put(bad, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):
            store.get(("a.b",), "k")
        assert store.list_namespaces() == []

    def test_kit_names_hostile_labels_and_keys_round_trip(self, store: BaseStore) -> None:
        written = {}
        for i, label in enumerate(HOSTILE_LABELS):
            for j, key in enumerate(HOSTILE_KEYS):
                ns = ("hostile", label)
                store.put(ns, key, {"i": i, "j": j, "key": key})
                written[(ns, key)] = {"i": i, "j": j, "key": key}
        for (ns, key), value in written.items():
            item = store.get(ns, key)
            assert item is not None and item.value == value and item.key == key and item.namespace == ns
        found = store.search(("hostile",), limit=len(written) + 5)
        assert _values(found) == _values([Item(value=v, key=k, namespace=n, created_at=None, updated_at=None) for (n, k), v in written.items()])  # type: ignore[arg-type]
        assert sorted(store.list_namespaces(prefix=("hostile",), limit=100)) == sorted(("hostile", lb) for lb in HOSTILE_LABELS)

    def test_kit_names_namespaces_never_share_an_item(self, store: BaseStore) -> None:
        pairs = [(("a",), "b/c"), (("a", "b"), "c"), (("a", "b/c"), "d"), (("a",), "b"), (("a", "b"), "c.json"),
                 (("a", "%62"), "c"), (("a", "b"), "%63"), (("a", "items"), "0")]
        for n, (ns, key) in enumerate(pairs):
            store.put(ns, key, {"n": n})
        for n, (ns, key) in enumerate(pairs):
            item = store.get(ns, key)
            assert item is not None and item.value == {"n": n}, (ns, key)

    # ------------------------------------------------------------ items

    def test_kit_items_put_get_update_delete(self, store: BaseStore) -> None:
        ns = ("users", "u1")
        assert store.get(ns, "prefs") is None
        store.put(ns, "prefs", {"theme": "dark", "nested": {"a": [1, 2, {"b": None}]}, "n": 1.5})
        first = store.get(ns, "prefs")
        assert first is not None and first.value == {"theme": "dark", "nested": {"a": [1, 2, {"b": None}]}, "n": 1.5}
        assert first.created_at <= first.updated_at
        store.put(ns, "prefs", {"theme": "light"})
        second = store.get(ns, "prefs")
        assert second is not None and second.value == {"theme": "light"} and second.updated_at >= first.updated_at
        store.delete(ns, "prefs")
        assert store.get(ns, "prefs") is None
        store.delete(ns, "never-was")  # deleting what is absent is no error
        assert store.search(ns) == []

    def test_kit_items_returned_values_are_copies_or_equal(self, store: BaseStore) -> None:
        store.put(("c",), "k", {"list": [1, 2]})
        item = store.get(("c",), "k")
        assert item is not None and item.dict()["value"] == {"list": [1, 2]}

    # ------------------------------------------------------------ batch

    def test_kit_batch_results_in_op_order_reads_see_the_state_before(self, store: BaseStore) -> None:
        store.put(("b",), "old", {"v": 0})
        results = store.batch([
            PutOp(("b",), "new", {"v": 1}),
            GetOp(("b",), "new"),
            GetOp(("b",), "old"),
            SearchOp(("b",), limit=10),
            ListNamespacesOp(limit=10),
            PutOp(("b",), "old", None),
        ])
        assert len(results) == 6 and results[0] is None and results[5] is None
        assert results[1] is None  # a read in a batch sees what was there before it
        assert isinstance(results[2], Item) and results[2].value == {"v": 0}
        assert [i.key for i in results[3]] == ["old"]  # type: ignore[union-attr]
        assert results[4] == [("b",)]
        assert store.get(("b",), "new") is not None and store.get(("b",), "old") is None
        assert store.batch([GetOp(("b",), "new"), GetOp(("b",), "new")])[0] == store.get(("b",), "new")

    def test_kit_batch_last_put_of_an_item_wins(self, store: BaseStore) -> None:
        store.batch([PutOp(("w",), "k", {"v": 1}), PutOp(("w",), "k", {"v": 2}), PutOp(("w",), "j", {"v": 3}), PutOp(("w",), "j", None)])
        got = store.get(("w",), "k")
        assert got is not None and got.value == {"v": 2} and store.get(("w",), "j") is None

    # ------------------------------------------------------------ search

    def _fill(self, store: BaseStore) -> None:
        rows = [
            ("a", {"kind": "fruit", "n": 1, "tags": ["x", "y"], "meta": {"lang": "en", "depth": {"d": 1}}, "text": "red apple"}),
            ("b", {"kind": "fruit", "n": 5, "tags": ["y"], "meta": {"lang": "fr", "depth": {"d": 2}}, "text": "yellow banana"}),
            ("c", {"kind": "veg", "n": 10, "tags": [], "meta": {"lang": "en", "depth": {"d": 1}}, "text": "green cabbage"}),
            ("d", {"kind": "veg", "n": 2.5, "meta": {"lang": "de"}, "text": "orange carrot"}),
        ]
        for key, value in rows:
            store.put(("docs", "food"), key, value)
        store.put(("docs", "other"), "e", {"kind": "fruit", "n": 7, "text": "purple plum"})
        store.put(("elsewhere",), "f", {"kind": "fruit", "n": 3})

    @pytest.mark.parametrize(
        "filter, keys",
        [
            ({"kind": "fruit"}, "abe"),
            ({"kind": {"$eq": "veg"}}, "cd"),
            ({"kind": {"$ne": "veg"}}, "abe"),
            ({"n": {"$gt": 2.5}}, "bce"),
            ({"n": {"$gte": 2.5}}, "bcde"),
            ({"n": {"$lt": 5}}, "ad"),
            ({"n": {"$lte": 5}}, "abd"),
            ({"n": {"$gt": 1, "$lt": 10}}, "bde"),
            ({"kind": "fruit", "n": {"$lt": 6}}, "ab"),
            ({"tags": ["y"]}, "b"),
            ({"kind": "none"}, ""),
        ],
    )
    def test_kit_search_filters(self, store: BaseStore, filter: dict[str, Any], keys: str) -> None:
        self._fill(store)
        assert sorted(i.key for i in store.search(("docs",), filter=filter, limit=50)) == list(keys)

    def test_kit_search_nested_filters(self, store: BaseStore) -> None:
        """A dict without ``$`` operators matches nested keys (``InMemoryStore``, PostgreSQL's JSONB)."""
        self._fill(store)
        assert sorted(i.key for i in store.search(("docs",), filter={"meta": {"lang": "en"}}, limit=50)) == ["a", "c"]
        assert sorted(i.key for i in store.search(("docs",), filter={"meta": {"depth": {"d": 1}}}, limit=50)) == ["a", "c"]

    def test_kit_search_prefix_and_pagination(self, store: BaseStore) -> None:
        self._fill(store)
        assert sorted(i.key for i in store.search(("docs",), limit=50)) == list("abcde")
        assert sorted(i.key for i in store.search(("docs", "food"), limit=50)) == list("abcd")
        assert store.search(("nothing",)) == []
        assert sorted(i.key for i in store.search((), limit=50)) == list("abcdef")
        pages = [store.search(("docs",), limit=2, offset=o) for o in (0, 2, 4, 6)]
        assert [len(p) for p in pages] == [2, 2, 1, 0]
        assert sorted(i.key for p in pages for i in p) == list("abcde")
        assert len(store.search(("docs",), filter={"kind": "fruit"}, limit=1)) == 1
        for item in pages[0]:
            assert item.namespace[:1] == ("docs",) and item.created_at <= item.updated_at

    def test_kit_search_query_without_index_returns_items(self, store: BaseStore) -> None:
        self._fill(store)
        found = store.search(("docs",), query="apple", limit=10)
        assert found and {i.key for i in found} <= set("abcde")

    # ------------------------------------------------------------ list_namespaces

    def _namespaces(self, store: BaseStore) -> None:
        for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "c"), ("b", "c", "d"), ("b", "x"), ("c",)]:
            store.put(ns, "k", {"v": 1})

    def test_kit_namespaces_order_prefix_suffix_wildcards_depth(self, store: BaseStore) -> None:
        self._namespaces(store)
        everything = [("a", "b", "c"), ("a", "b", "d"), ("a", "c"), ("b", "c", "d"), ("b", "x"), ("c",)]
        assert store.list_namespaces() == everything
        assert store.list_namespaces(prefix=("a",)) == everything[:3]
        assert store.list_namespaces(prefix=("a", "b")) == everything[:2]
        assert store.list_namespaces(suffix=("d",)) == [("a", "b", "d"), ("b", "c", "d")]
        assert store.list_namespaces(prefix=("*", "c")) == [("a", "c"), ("b", "c", "d")]
        assert store.list_namespaces(suffix=("*", "c")) == [("a", "b", "c"), ("a", "c")]
        assert store.list_namespaces(prefix=("a",), suffix=("c",)) == [("a", "b", "c"), ("a", "c")]
        assert store.list_namespaces(max_depth=1) == [("a",), ("b",), ("c",)]
        assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "c"), ("b", "c"), ("b", "x"), ("c",)]
        assert store.list_namespaces(limit=2, offset=1) == everything[1:3]
        assert store.list_namespaces(prefix=("zzz",)) == []

    def test_kit_namespaces_a_deleted_item_leaves_other_namespaces(self, store: BaseStore) -> None:
        self._namespaces(store)
        store.delete(("c",), "k")
        assert ("a", "c") in store.list_namespaces()

    # ------------------------------------------------------------ concurrency

    def test_kit_concurrent_writers_lose_nothing(self, store: BaseStore) -> None:
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                for i in range(15):
                    store.put(("shared",), f"w{w}-{i}", {"w": w, "i": i})
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        found = store.search(("shared",), limit=100)
        assert sorted(i.key for i in found) == sorted(f"w{w}-{i}" for w in range(4) for i in range(15))

    # ------------------------------------------------------------ differential

    nested_filters = True  # False: the differential leaves nested filters out (test_kit_search_nested_filters says why)

    @pytest.mark.parametrize("seed", range(12))
    def test_kit_differential_random_ops_match_in_memory_store(self, store: BaseStore, seed: int) -> None:
        oracle = InMemoryStore()
        for ops in random_ops(random.Random(seed), nested=self.nested_filters):
            held = {ns for ns, items in oracle._data.items() if items}  # the oracle also lists emptied ones
            mine, theirs = store.batch(ops), oracle.batch(ops)
            for op, a, b in zip(ops, mine, theirs):
                assert _comparable(op, a, held) == _comparable(op, b, held), op


_NS = [("u",), ("u", "x"), ("u", "y"), ("v",), ("v", "x", "z")]


def random_ops(rng: random.Random, batches: int = 25, *, nested: bool = True) -> list[list[Any]]:
    """Batches of random ops over a few namespaces and keys, JSON values only."""
    out = []
    for _ in range(batches):
        batch: list[Any] = []
        for _ in range(rng.randint(1, 4)):
            ns, key = rng.choice(_NS), rng.choice("abcd")
            roll = rng.random()
            if roll < 0.45:
                batch.append(PutOp(ns, key, {"n": rng.randint(0, 5), "s": rng.choice(["p", "q"]), "d": {"e": rng.randint(0, 2)}}))
            elif roll < 0.6:
                batch.append(PutOp(ns, key, None))
            elif roll < 0.75:
                batch.append(GetOp(ns, key))
            elif roll < 0.9:
                wanted = rng.choice([None, {"s": "p"}, {"n": {"$gte": 3}}, {"n": {"$ne": 2}}] + ([{"d": {"e": 1}}] if nested else []))
                batch.append(SearchOp(ns[: rng.randint(0, len(ns))], wanted, 100, 0))
            else:
                batch.append(ListNamespacesOp(max_depth=rng.choice([None, 1, 2]), limit=100))
        out.append(batch)
    return out


def _comparable(op: Any, result: Any, held: set[tuple[str, ...]]) -> Any:
    """A result up to what the kit leaves unspecified (the module docstring)."""
    if isinstance(op, GetOp):
        return None if result is None else (result.namespace, result.key, result.value)
    if isinstance(op, SearchOp):
        return _values(result)
    if isinstance(op, ListNamespacesOp):
        depth = op.max_depth
        return [ns for ns in result if any((h if depth is None else h[:depth]) == ns for h in held)]
    return result


class AsyncConformance:
    """The ``a*`` twins (``aget``, ``aput``, ``asearch``, ``alist_namespaces``, ``abatch``) on a running loop."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    async def _roundtrip_async(self, store: BaseStore) -> None:
        await store.aput(("async", "ns"), "k", {"v": 1})
        item = await store.aget(("async", "ns"), "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in await store.asearch(("async",))] == ["k"]
        assert await store.alist_namespaces() == [("async", "ns")]
        await store.adelete(("async", "ns"), "k")
        assert await store.aget(("async", "ns"), "k") is None

    @pytest.mark.anyio
    async def test_kit_items_async_twins(self, store: BaseStore) -> None:
        await self._roundtrip_async(store)

    @pytest.mark.anyio
    async def test_kit_batch_async(self, store: BaseStore) -> None:
        results = await store.abatch([PutOp(("ab",), "k", {"v": 1}), GetOp(("ab",), "k")])
        assert results == [None, None]
        got = (await store.abatch([GetOp(("ab",), "k")]))[0]
        assert isinstance(got, Item) and got.value == {"v": 1}


class IndexConformance:
    """Vector search: ``make_store(index={"dims": DIMS, "embed": letter_embed, "fields": [...]})``."""

    def _indexed(self, make_store: Callable[..., BaseStore], fields: list[str] | None = None) -> BaseStore:
        store = make_store(index={"dims": DIMS, "embed": letter_embed, "fields": fields or ["text"]})
        for key, text in [("1", "apple apple pie"), ("2", "zebra quiz"), ("3", "banana bread"), ("4", "apple")]:
            store.put(("idx",), key, {"text": text, "n": int(key)})
        return store

    def test_kit_index_query_ranks_by_similarity(self, make_store: Callable[..., BaseStore]) -> None:
        store = self._indexed(make_store)
        found = store.search(("idx",), query="apple", limit=4)
        assert [i.key for i in found][:2] == ["4", "1"] and found[-1].key == "2"
        scores = [i.score for i in found]
        assert all(s is not None for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
        assert math.isclose(found[0].score or 0.0, 1.0, rel_tol=1e-6)

    def test_kit_index_query_with_filter_and_offset(self, make_store: Callable[..., BaseStore]) -> None:
        store = self._indexed(make_store)
        found = store.search(("idx",), query="apple", filter={"n": {"$gte": 2}}, limit=2)
        assert [i.key for i in found] == ["4", "3"]
        assert [i.key for i in store.search(("idx",), query="apple", limit=2, offset=1)] == ["1", "3"]

    def test_kit_index_false_is_not_ranked_but_found(self, make_store: Callable[..., BaseStore]) -> None:
        store = self._indexed(make_store)
        store.put(("idx",), "5", {"text": "apple"}, index=False)
        assert store.get(("idx",), "5") is not None
        found = store.search(("idx",), query="apple", limit=10)
        scored = [i.key for i in found if i.score is not None]
        assert "5" not in scored and "4" in scored

    def test_kit_index_update_reembeds(self, make_store: Callable[..., BaseStore]) -> None:
        store = self._indexed(make_store)
        store.put(("idx",), "2", {"text": "apple", "n": 2})
        assert {i.key for i in store.search(("idx",), query="apple", limit=2)} == {"2", "4"}


class TTLConformance:
    """TTL with a clock the test moves: fixture ``make_ttl_store(ttl_config) -> (store, advance)``."""

    def test_kit_ttl_expired_items_are_not_returned(self, make_ttl_store: Callable[..., Any]) -> None:
        store, advance = make_ttl_store({"default_ttl": 10, "refresh_on_read": False})
        assert store.supports_ttl
        store.put(("t",), "short", {"v": 1})
        store.put(("t",), "long", {"v": 2}, ttl=60)
        store.put(("t",), "forever", {"v": 3}, ttl=None)
        advance(11)
        assert store.get(("t",), "short") is None
        assert sorted(i.key for i in store.search(("t",))) == ["forever", "long"]
        advance(50)
        assert sorted(i.key for i in store.search(("t",))) == ["forever"]

    def test_kit_ttl_read_refreshes(self, make_ttl_store: Callable[..., Any]) -> None:
        store, advance = make_ttl_store({"default_ttl": 10, "refresh_on_read": True})
        store.put(("t",), "k", {"v": 1})
        store.put(("t",), "unread", {"v": 1})
        advance(8)
        assert store.get(("t",), "k") is not None
        advance(8)
        assert store.get(("t",), "k") is not None and store.get(("t",), "unread") is None
        assert store.get(("t",), "k", refresh_ttl=False) is not None
        advance(11)
        assert store.get(("t",), "k") is None

    def test_kit_ttl_sweep_deletes_the_expired(self, make_ttl_store: Callable[..., Any]) -> None:
        store, advance = make_ttl_store({"default_ttl": 5, "refresh_on_read": False})
        for key in "abc":
            store.put(("t",), key, {"v": key})
        store.put(("t",), "kept", {"v": 0}, ttl=None)
        advance(6)
        assert store.sweep_ttl() == 3  # type: ignore[attr-defined]
        assert store.sweep_ttl() == 0  # type: ignore[attr-defined]
        assert [i.key for i in store.search(("t",))] == ["kept"]
