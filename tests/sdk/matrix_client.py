"""The official `anthropic` and `openai` SDKs in the real-client matrix (tests/it/sdk_matrix.rs).

    python matrix_client.py GATEWAY_URL CLIENT_KIND SCENARIO...

CLIENT_KIND is `anthropic` (Messages), `openai-chat` (Chat Completions) or `openai-responses`
(Responses); the gateway sits in front of a mock upstream of any format. MATRIX_SPEC (JSON, written
by the Rust test) says what the upstream answers each turn: text, tool call, and usage as the
upstream counted it (input without cache, cache read, cache write, output). Each client must see it
in its own protocol's convention: Anthropic's `input_tokens` exclude cached input; Chat's
`prompt_tokens` and Responses' `input_tokens` include it.

Scenarios (each makes exactly three upstream requests, in this order):
  conversation         a text turn; then, with the first exchange as history, a question that
                       gets a tool call; then the tool result, which gets the final answer.
  stream_conversation  the same, streamed, with the SDK's stream helpers accumulating the events.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

from common import check, eq, gateway_url, run

URL = gateway_url()
if len(sys.argv) < 3:
    sys.exit(f"usage: {sys.argv[0]} GATEWAY_URL CLIENT_KIND SCENARIO...")
KIND = sys.argv.pop(2)  # common.run reads the scenarios from sys.argv[2:]
SPEC: Dict[str, Any] = json.loads(os.environ["MATRIX_SPEC"])
HELLO, TOOL_TURN, FINAL = SPEC["turns"]
TOOL = SPEC["tool"]
SYSTEM = SPEC["system"]
Q1, Q2 = SPEC["questions"]


def total_input(u: Dict[str, int]) -> int:
    return u["input"] + u["cache_read"] + u["cache_write"]


# ================================================================================ Anthropic

def anthropic_conversation(stream: bool) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=URL, api_key="sk-ant-client-key-not-forwarded", max_retries=0, timeout=30,
                                 http_client=anthropic.DefaultHttpxClient(trust_env=False))
    tools = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}]
    what = "stream" if stream else "create"

    def ask(messages: List[Any], with_tools: bool, turn: Dict[str, Any], label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="claude-sonnet-4-5", max_tokens=1024, system=SYSTEM, messages=messages)
        if with_tools:
            kwargs["tools"] = tools
        if not stream:
            msg = client.messages.create(**kwargs)
        else:
            texts, partial_json = [], []
            with client.messages.stream(**kwargs) as s:
                for event in s:
                    if event.type == "text":
                        texts.append(event.text)
                    elif event.type == "input_json":
                        partial_json.append(event.partial_json)
                msg = s.get_final_message()
            eq("".join(texts), turn["text"], f"{label}: text events")
            if turn.get("tool"):
                eq(json.loads("".join(partial_json)), turn["tool"]["arguments"], f"{label}: input_json events")
        check(isinstance(msg, anthropic.types.Message), f"{label}: not a Message: {type(msg)}")
        eq(msg.model, SPEC["upstream_model"], f"{label}: model")
        eq(msg.role, "assistant", f"{label}: role")
        text = "".join(b.text for b in msg.content if b.type == "text")
        eq(text, turn["text"], f"{label}: text")
        calls = [b for b in msg.content if b.type == "tool_use"]
        if turn.get("tool"):
            eq([b.type for b in msg.content], ["text", "tool_use"], f"{label}: content block types")
            eq([(c.name, c.input) for c in calls], [(turn["tool"]["name"], turn["tool"]["arguments"])],
               f"{label}: tool_use")
            check(bool(calls[0].id), f"{label}: tool_use id {calls[0].id!r}")
            eq(msg.stop_reason, "tool_use", f"{label}: stop_reason")
        else:
            eq([b.type for b in msg.content], ["text"], f"{label}: content block types")
            eq(msg.stop_reason, "end_turn", f"{label}: stop_reason")
        u = turn["usage"]
        eq((msg.usage.input_tokens, msg.usage.cache_read_input_tokens or 0,
            msg.usage.cache_creation_input_tokens or 0, msg.usage.output_tokens),
           (u["input"], u["cache_read"], u["cache_write"], u["output"]),
           f"{label}: usage (input, cache read, cache write, output)")
        return msg

    messages: List[Any] = [{"role": "user", "content": Q1}]
    m1 = ask(messages, False, HELLO, f"{what} turn 1")
    messages += [{"role": "assistant", "content": m1.content}, {"role": "user", "content": Q2}]
    m2 = ask(messages, True, TOOL_TURN, f"{what} turn 2 (tool call)")
    call = next(b for b in m2.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": m2.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": SPEC["tool_result"]}]},
    ]
    ask(messages, True, FINAL, f"{what} turn 3 (after the tool result)")


# ======================================================================= OpenAI Chat Completions

def chat_conversation(stream: bool) -> None:
    import openai

    client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-proj-client-key-not-forwarded", max_retries=0,
                           timeout=30, http_client=openai.DefaultHttpxClient(trust_env=False))
    tools = [{"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                               "parameters": TOOL["parameters"]}}]
    what = "stream" if stream else "create"

    def ask(messages: List[Any], with_tools: bool, turn: Dict[str, Any], label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="gpt-4o-mini", messages=messages)
        if with_tools:
            kwargs["tools"] = tools
        if not stream:
            c = client.chat.completions.create(**kwargs)
            check(isinstance(c, openai.types.chat.ChatCompletion), f"{label}: not a ChatCompletion: {type(c)}")
        else:
            deltas, args_done = [], []
            with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
                for event in s:
                    if event.type == "content.delta":
                        deltas.append(event.delta)
                    elif event.type == "tool_calls.function.arguments.done":
                        args_done.append((event.name, json.loads(event.arguments)))
                c = s.get_final_completion()
            eq("".join(deltas), turn["text"], f"{label}: content.delta events")
            want_args = [(turn["tool"]["name"], turn["tool"]["arguments"])] if turn.get("tool") else []
            eq(args_done, want_args, f"{label}: tool_calls.function.arguments.done events")
        eq(c.model, SPEC["upstream_model"], f"{label}: model")
        eq(len(c.choices), 1, f"{label}: choices")
        msg = c.choices[0].message
        eq(msg.role, "assistant", f"{label}: role")
        eq(msg.content, turn["text"], f"{label}: content")
        if turn.get("tool"):
            calls = msg.tool_calls or []
            eq([(t.type, t.function.name, json.loads(t.function.arguments)) for t in calls],
               [("function", turn["tool"]["name"], turn["tool"]["arguments"])], f"{label}: tool_calls")
            check(bool(calls[0].id), f"{label}: tool call id {calls[0].id!r}")
            eq(c.choices[0].finish_reason, "tool_calls", f"{label}: finish_reason")
        else:
            check(not msg.tool_calls, f"{label}: unexpected tool_calls {msg.tool_calls!r}")
            eq(c.choices[0].finish_reason, "stop", f"{label}: finish_reason")
        u = turn["usage"]
        check(c.usage is not None, f"{label}: no usage")
        cached = c.usage.prompt_tokens_details.cached_tokens if c.usage.prompt_tokens_details else None
        eq((c.usage.prompt_tokens, cached or 0, c.usage.completion_tokens, c.usage.total_tokens),
           (total_input(u), u["cache_read"], u["output"], total_input(u) + u["output"]),
           f"{label}: usage (prompt, cached, completion, total)")
        return c

    messages: List[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": Q1}]
    c1 = ask(messages, False, HELLO, f"{what} turn 1")
    messages += [assistant_message(c1, stream), {"role": "user", "content": Q2}]
    c2 = ask(messages, True, TOOL_TURN, f"{what} turn 2 (tool call)")
    call = c2.choices[0].message.tool_calls[0]
    messages += [assistant_message(c2, stream),
                 {"role": "tool", "tool_call_id": call.id, "content": SPEC["tool_result"]}]
    ask(messages, True, FINAL, f"{what} turn 3 (after the tool result)")


def assistant_message(c: Any, stream: bool) -> Any:
    """The assistant turn for the history: as the docs show it (the message object itself), or,
    for an accumulated stream, the plain dict a caller builds from it."""
    msg = c.choices[0].message
    if not stream:
        return msg
    out: Dict[str, Any] = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [{"id": t.id, "type": "function",
                              "function": {"name": t.function.name, "arguments": t.function.arguments}}
                             for t in msg.tool_calls]
    return out


# ============================================================================= OpenAI Responses

def responses_conversation(stream: bool) -> None:
    import openai

    client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-proj-client-key-not-forwarded", max_retries=0,
                           timeout=30, http_client=openai.DefaultHttpxClient(trust_env=False))
    tools = [{"type": "function", "name": TOOL["name"], "description": TOOL["description"],
              "parameters": TOOL["parameters"], "strict": False}]
    what = "stream" if stream else "create"

    def ask(items: List[Any], with_tools: bool, turn: Dict[str, Any], label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="gpt-4.1", instructions=SYSTEM, input=items)
        if with_tools:
            kwargs["tools"] = tools
        if not stream:
            r = client.responses.create(**kwargs)
        else:
            deltas, args_done, seq = [], [], []
            with client.responses.stream(**kwargs) as s:
                for event in s:
                    seq.append(event.sequence_number)
                    if event.type == "response.output_text.delta":
                        deltas.append(event.delta)
                    elif event.type == "response.function_call_arguments.done":
                        args_done.append(json.loads(event.arguments))
                r = s.get_final_response()
            eq(seq, list(range(len(seq))), f"{label}: sequence numbers")
            eq("".join(deltas), turn["text"], f"{label}: output_text.delta events")
            eq(args_done, [turn["tool"]["arguments"]] if turn.get("tool") else [],
               f"{label}: function_call_arguments.done events")
        check(isinstance(r, openai.types.responses.Response), f"{label}: not a Response: {type(r)}")
        eq(r.status, "completed", f"{label}: status")
        eq(r.model, SPEC["upstream_model"], f"{label}: model")
        eq(r.output_text, turn["text"], f"{label}: output_text")
        if turn.get("tool"):
            eq([o.type for o in r.output], ["message", "function_call"], f"{label}: output item types")
            call = r.output[1]
            eq((call.name, json.loads(call.arguments)), (turn["tool"]["name"], turn["tool"]["arguments"]),
               f"{label}: function_call")
            check(bool(call.call_id), f"{label}: call_id {call.call_id!r}")
        else:
            eq([o.type for o in r.output], ["message"], f"{label}: output item types")
        u = turn["usage"]
        cached = r.usage.input_tokens_details.cached_tokens if r.usage.input_tokens_details else None
        eq((r.usage.input_tokens, cached or 0, r.usage.output_tokens, r.usage.total_tokens),
           (total_input(u), u["cache_read"], u["output"], total_input(u) + u["output"]),
           f"{label}: usage (input, cached, output, total)")
        return r

    # The history the way the docs build it: the earlier output items themselves.
    items: List[Any] = [{"role": "user", "content": Q1}]
    r1 = ask(items, False, HELLO, f"{what} turn 1")
    items += [*r1.output, {"role": "user", "content": Q2}]
    r2 = ask(items, True, TOOL_TURN, f"{what} turn 2 (tool call)")
    call = next(o for o in r2.output if o.type == "function_call")
    items += [*r2.output, {"type": "function_call_output", "call_id": call.call_id, "output": SPEC["tool_result"]}]
    ask(items, True, FINAL, f"{what} turn 3 (after the tool result)")


CONVERSATIONS = {
    "anthropic": anthropic_conversation,
    "openai-chat": chat_conversation,
    "openai-responses": responses_conversation,
}
if KIND not in CONVERSATIONS:
    sys.exit(f"unknown client kind {KIND!r}; known: {sorted(CONVERSATIONS)}")
conversation = CONVERSATIONS[KIND]

run({
    "conversation": lambda: conversation(False),
    "stream_conversation": lambda: conversation(True),
})
