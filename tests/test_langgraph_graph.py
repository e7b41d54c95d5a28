"""A real LangGraph program on ``MemrevStore``: a ``StateGraph`` compiled with ``store=`` and
LangGraph's own checkpointer, nodes reading and writing memories through ``runtime.store`` and
``get_store()``, a scripted chat model (offline), run with ``invoke`` and ``ainvoke``; its
writes are commits in the same log as AG2 files and AutoGen items of one store."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from autogen_core.memory import MemoryContent, MemoryMimeType
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from memrev import VersionedStore
from memrev.langgraph import MemrevStore

pytestmark = pytest.mark.anyio


class State(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]
    user: str


def build(model: GenericFakeChatModel, lg: MemrevStore, *, async_nodes: bool) -> Any:
    def recall(state: State, runtime: Runtime) -> dict[str, Any]:
        memories = runtime.store.search(("memories", state["user"]), limit=10)  # type: ignore[union-attr]
        known = "; ".join(sorted(m.value["fact"] for m in memories)) or "nothing"
        return {"messages": [HumanMessage(f"(known: {known})")]}

    async def arecall(state: State, runtime: Runtime) -> dict[str, Any]:
        memories = await runtime.store.asearch(("memories", state["user"]), limit=10)  # type: ignore[union-attr]
        known = "; ".join(sorted(m.value["fact"] for m in memories)) or "nothing"
        return {"messages": [HumanMessage(f"(known: {known})")]}

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def remember(state: State) -> dict[str, Any]:
        # a sync node, also inside ainvoke: LangGraph runs it in a worker thread while the loop runs
        store = get_store()
        reply = state["messages"][-1].content
        if isinstance(reply, str) and reply.startswith("REMEMBER "):
            fact = reply.removeprefix("REMEMBER ")
            store.put(("memories", state["user"]), f"fact-{len(fact)}", {"fact": fact})
        return {}

    graph = StateGraph(State)
    graph.add_node("recall", arecall if async_nodes else recall)
    graph.add_node("answer", answer)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "answer")
    graph.add_edge("answer", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=lg, checkpointer=InMemorySaver())


def scripted(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


def test_a_graph_invoked_synchronously_remembers_across_threads(tmp_path: Any) -> None:
    store = VersionedStore(tmp_path / "s")
    lg = MemrevStore(store)
    try:
        app = build(scripted("REMEMBER likes tea", "You like tea"), lg, async_nodes=False)
        app.invoke({"messages": [HumanMessage("I like tea")], "user": "ann"}, {"configurable": {"thread_id": "1"}})
        out = app.invoke({"messages": [HumanMessage("what do I like?")], "user": "ann"}, {"configurable": {"thread_id": "2"}})
        assert "(known: likes tea)" in [m.content for m in out["messages"]]
        item = lg.get(("memories", "ann"), "fact-9")
        assert item is not None and item.value == {"fact": "likes tea"}
    finally:
        lg.close()
        store.close()


async def test_a_graph_run_with_ainvoke_shares_one_log_with_ag2_and_autogen(tmp_path: Any) -> None:
    async with VersionedStore(tmp_path / "s") as store:
        lg = MemrevStore(store)
        await store.write("/notes/plan.md", "# plan\n")  # an AG2 KnowledgeStore file
        await store.add(MemoryContent(content="prefers mornings", mime_type=MemoryMimeType.TEXT))  # an AutoGen item
        app = build(scripted("REMEMBER owns a cat", "noted", "You own a cat"), lg, async_nodes=True)
        config = {"configurable": {"thread_id": "t"}}
        await app.ainvoke({"messages": [HumanMessage("I own a cat")], "user": "bo"}, config)
        await app.ainvoke({"messages": [HumanMessage("ok")], "user": "bo"}, config)
        out = await app.ainvoke({"messages": [HumanMessage("what do I own?")], "user": "bo"}, {"configurable": {"thread_id": "u"}})
        assert "(known: owns a cat)" in [m.content for m in out["messages"]]
        log = await store.log()
        paths = [p for c in log for p in c.paths]
        assert "/langgraph/memories/bo/fact-10.json" in paths and "/notes/plan.md" in paths
        assert any(p.startswith("/autogen/default/items/") for p in paths), paths  # AutoGen's item, same log
        history = await lg.ahistory(("memories", "bo"), "fact-10")
        assert [v["value"] for v in history] == [{"fact": "owns a cat"}]
        lg.close()
