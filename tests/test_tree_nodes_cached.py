"""A commit caches the tree nodes it writes in decoded form without decoding them (issue 26).

``Repository.put_tree`` decoded every node it had just encoded, two decodes per W1
commit; ``trees.dir_set`` now hands it the decoded form. That form must be exactly
what ``decode_tree`` gives (entries in stored order), or a reader of the cache would
see another tree than a reader of the store: a differential test over random edits
that make leaves split and merge.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrev.core.objects as objects
import memrev.repo.commit as commit_mod
import memrev.repo.reading as reading
from memrev.backends.sqlite import SqliteBackend
from memrev.repo.ops import Delete, Write
from memrev.repo.repository import Repository


def _as_stored(node):
    kind, body = node
    return (kind, list(body.items())) if kind == "T" else (kind, body[0], list(body[1].items()))


def test_a_commit_on_a_warm_cache_decodes_no_tree_node(tmp_path: Path, monkeypatch):
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    for i in range(40):
        repo.commit("main", [Write(f"/memory/f{i % 10}.md", b"v%d" % i)], author="t")
    decoded = []
    real = objects.decode_tree

    def counting(data):
        decoded.append(data)
        return real(data)

    monkeypatch.setattr(commit_mod, "decode_tree", counting)
    monkeypatch.setattr(reading, "decode_tree", counting)
    for i in range(50):
        repo.commit("main", [Write(f"/memory/f{i % 10}.md", b"w%d" % i)], author="t")
    assert decoded == [], f"{len(decoded)} tree nodes decoded in 50 commits (was 100: two a commit)"
    repo.backend.close()


names = st.sampled_from([f"n{i}" for i in range(80)])
paths = st.lists(names, min_size=1, max_size=3).map(lambda segs: "/" + "/".join(segs))
ops = st.lists(st.tuples(st.booleans(), paths, st.binary(max_size=8)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(ops, min_size=1, max_size=6))
def test_the_nodes_a_commit_caches_are_what_decoding_their_bytes_gives(tmp_path_factory, batches):
    """Random writes and deletes in up to 80 names a folder (leaves split past 32 and
    split nodes fold back): every node handed to the cache equals ``decode_tree`` of its
    bytes, entry order included, and the store reads the same through a cold handle."""
    db = tmp_path_factory.mktemp("t") / "m.db"
    repo = Repository(SqliteBackend(db))
    handed = []
    engine = type(repo)
    real = engine.put_tree

    def recording(self, data, node=None):
        handed.append((data, node))
        return real(self, data, node)

    engine.put_tree = recording
    try:
        files: dict[str, bytes] = {}
        for batch in batches:
            change = []
            for write, path, body in batch:
                if write and not any(p.startswith(path + "/") for p in files) and not any(
                    path.startswith(p + "/") for p in files
                ):
                    change.append(Write(path, body))
                    files[path] = body
                elif path in files:
                    change.append(Delete(path))
                    del files[path]
            if change:
                repo.commit("main", change, author="t")
    finally:
        engine.put_tree = real
    for data, node in handed:
        assert node is not None, "a node was stored without its decoded form"
        assert _as_stored(node) == _as_stored(objects.decode_tree(data))
    cold = Repository(SqliteBackend(db))
    head = cold.head("main")
    for path, body in files.items():
        entry = cold.entry_at(head, path) if head is not None else None
        assert entry is not None and cold.content(entry.oid) == body, path
    cold.backend.close()
    repo.backend.close()
