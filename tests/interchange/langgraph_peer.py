"""Run with LangGraph installed: write a thread's checkpoints with LangGraph's own saver.

``python langgraph_peer.py sqlite PATH`` (``SqliteSaver``) or ``python
langgraph_peer.py postgres DSN`` (``PostgresSaver``) runs a small graph over
``MessagesState`` for two turns of thread ``t1`` (a system prompt, a tool call
with its result, text blocks), and prints, as one JSON line, what
``get_state(...).values["messages"]`` returns (each message's ``model_dump()``).
Not collected by pytest.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def _bot(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    if isinstance(last, HumanMessage) and "weather" in str(last.content):
        call = {"id": "call-1", "name": "weather", "args": {"city": "Paris", "celsius": 21.5}}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(content="Sunny, 21.5 C.")]}
    return {"messages": [AIMessage(content=[{"type": "text", "text": "Rain."}])]}


def _tool(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
    return {"messages": [ToolMessage(content='{"sky": "sunny"}', tool_call_id=call["id"])]}


def _route(state: MessagesState) -> str:
    return "tool" if getattr(state["messages"][-1], "tool_calls", None) else END


def _run(checkpointer: Any) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("bot", _bot)
    graph.add_node("tool", _tool)
    graph.add_edge(START, "bot")
    graph.add_conditional_edges("bot", _route, ["tool", END])
    graph.add_edge("tool", "bot")
    app = graph.compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": "t1"}}
    first = [SystemMessage(content="Be brief."), HumanMessage(content="weather in Paris?")]
    app.invoke({"messages": first}, config)
    app.invoke({"messages": [HumanMessage(content="And tomorrow, caf\u00e9?")]}, config)
    messages = app.get_state(config).values["messages"]
    print(json.dumps([m.model_dump() for m in messages]))


def main(kind: str, where: str) -> None:
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        with sqlite3.connect(where, check_same_thread=False) as conn:
            _run(SqliteSaver(conn))
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(where) as saver:
        saver.setup()
        _run(saver)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
