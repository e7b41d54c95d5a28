"""Page load times of ``memrev serve`` on a 100k-commit store (issues 12 and 25).

    python bench/viewer.py [STORE_DIR] [--commits 100000] [--versions 5000] [--only new|old]

Builds the store once if STORE_DIR does not hold one (ordinary commits, one
per write, about 0.7 ms each on SQLite: 100k in a few minutes): turns of two
commits, each turn of one of 200 sessions (provenance ``agent``, ``session``,
``turn`` on every commit): the first commit writes ``/memory/working.md``
(VERSIONS versions in all, each rewrites one line of 40) or one of 500 notes,
the second appends an ag2 event (the user's message) to that session's
``/log/<session>.jsonl``. Then starts ``memrev serve`` as its own process
and times each page over HTTP (server time + transfer, median of 5 after one
warm-up request), and prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from memrev import VersionedStore  # noqa: E402 - after the sys.path lines above
from viewer_stores import running_viewer  # noqa: E402

WM = "/memory/working.md"


def working_memory(version: int) -> str:
    lines = [f"- fact {i}: unchanged line of the working memory" for i in range(40)]
    lines[version % 40] = f"- fact {version % 40}: rewritten in version {version}"
    return "# Working memory\n" + "\n".join(lines) + "\n"


def event(turn: int, session: int) -> str:
    """One ag2 event-log line: the user's message of a turn."""
    doc = {"type": "ag2.events.input_events.ModelRequest",
           "data": {"parts": [{"content": f"message {turn} of session {session}"}]}}
    return json.dumps(doc) + "\n"


async def build(store_dir: Path, commits: int, versions: int) -> None:
    every = max(2, (commits // versions) // 2 * 2)  # an even step: working-memory writes are first commits of turns
    async with VersionedStore(store_dir, author="bench") as s:
        made = 0
        for i in range(commits):
            k = i // 2  # the turn, counted over all sessions
            session, turn = k % 200, k // 200 + 1
            meta = {"agent": f"agent-{session % 3}", "session": f"session-{session}", "turn": turn}
            if i % 2:
                async with s.provenance(**meta):
                    await s.append(f"/log/session-{session}.jsonl", event(turn, session))
            elif i % every == 0 and made < versions:
                await s.write(WM, working_memory(made), meta=meta)
                made += 1
            else:
                await s.write(f"/notes/{i % 500}.md", f"note {i}\n", meta=meta)
            if i % 10_000 == 0:
                print(f"  {i} commits", file=sys.stderr)


def timed(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.perf_counter() - start, len(body)


def all_versions(base: str) -> list[str]:
    ids, url = [], f"/api/history?path={WM}&limit=1000"
    while url:
        with urllib.request.urlopen(base + url) as r:
            ids += [c["id"] for c in json.load(r)]
            link = r.headers.get("Link")
        url = link[1 : link.index(">")] if link else None
    return ids[::-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", nargs="?", default=".bench-viewer-store")
    ap.add_argument("--commits", type=int, default=100_000)
    ap.add_argument("--versions", type=int, default=5_000)
    ap.add_argument("--only", choices=("new", "old"), default=None, help="only issue 25's pages, or only issue 12's")
    args = ap.parse_args()
    store = Path(args.store)
    if not store.exists():
        t = time.perf_counter()
        asyncio.run(build(store, args.commits, args.versions))
        print(f"built {args.commits} commits in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    pages = [
        ("store (/)", "/"),
        ("log, first page (50)", "/log"),
        ("log, 2nd page (cursor)", None),
        ("log filtered by agent", "/log?agent=agent-1"),
        (f"log of {WM}", f"/log?path={WM}"),
        (f"timeline of {WM} (first 200 of 5,000)", f"/history?path={WM}"),
        ("timeline JSON, 1,000 versions in one page", f"/api/history?path={WM}&limit=1000"),
        (f"diff: last change to {WM}", f"/diff?path={WM}"),
        ("diff: an old change (versions 100 -> 101 of 5,000)", "OLD_DIFF"),
        (f"blame {WM} (5,000 versions)", f"/blame?path={WM}"),
        ("commit", "/commit/HEAD"),
        ("graph (100 commits)", "/graph"),
        (f"search {WM} (reads all 5,000 versions)", f"/search?path={WM}&text=version%204999"),
    ]
    new_pages = [  # issue 25
        ("store (/) with the session timeline (500 commits)", "/"),
        ("tree /", "/tree"),
        ("tree /notes (500 files, last change of 200)", "/tree?path=/notes"),
        ("tree /notes at HEAD~(half the commits)", f"/tree?path=/notes&rev=HEAD~{args.commits // 2}"),
        (f"file {WM} (Markdown rendered)", f"/file?path={WM}"),
        (f"file {WM} (source, line links)", f"/file?path={WM}&view=source"),
        (f"raw {WM}", f"/raw?path={WM}"),
        (f"why {WM}:5 (blame over 5,000 versions, then the turn)", f"/why?path={WM}&line=5"),
        (f"why {WM} (its last change)", f"/why?path={WM}"),
        ("conversation /log/session-7.jsonl (newest 10 of 250 turns)", "/conversation?path=/log/session-7.jsonl"),
        ("conversation, 2nd page (cursor)", "CONV_2"),
        ("search at HEAD (701 files)", "/search?text=version%204999"),
        ("search at HEAD, ignoring case", "/search?text=VERSION%204999&i=1"),
        ("search in history, all paths (one page: at most 2,000 commits read)", "/search?text=version%204999&history=1"),
        ("search in history, ignoring case", "/search?text=VERSION%204999&history=1&i=1"),
        ("compare HEAD~1000 with HEAD", "/compare?a=HEAD~1000&b=HEAD"),
    ]
    if args.only == "new":
        pages = new_pages
    elif args.only is None:
        pages = pages + new_pages
    with running_viewer(store) as base:
        with urllib.request.urlopen(base + "/api/log?limit=50") as r:
            link = r.headers["Link"]
        second = link[1 : link.index(">")].replace("/api/log", "/log")
        old = all_versions(base) if any(u == "OLD_DIFF" for _, u in pages) else []  # oldest first, by following the JSON pages
        with urllib.request.urlopen(base + "/api/conversation?path=/log/session-7.jsonl") as r:
            conv = r.headers.get("Link", "<>")
        conv_2 = conv[1 : conv.index(">")].replace("/api/conversation", "/conversation")
        print("| page | median | bytes |\n|---|---:|---:|")
        for name, url in pages:
            url = url or second
            if url == "OLD_DIFF":
                url = f"/diff?path={WM}&a={old[99]}&b={old[100]}"
            if url == "CONV_2":
                if not conv_2:  # fewer turns than a page
                    continue
                url = conv_2
            timed(base + url)
            runs = [timed(base + url) for _ in range(5)]
            ms = statistics.median(t for t, _ in runs) * 1000
            print(f"| {name} | {ms:.0f} ms | {runs[0][1]:,} |")
    print(f"\n(machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
