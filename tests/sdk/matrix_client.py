"""The official `anthropic`, `openai` and `google-genai` SDKs in the real-client matrix
(tests/it/sdk_matrix.rs).

    python matrix_client.py GATEWAY_URL CLIENT_KIND SCENARIO...

CLIENT_KIND is `anthropic` (Messages), `openai-chat` (Chat Completions), `openai-responses`
(Responses) or `gemini` (the Gemini API with `google-genai`); the gateway sits in front of a mock
upstream of any format. MATRIX_SPEC (JSON, written
by the Rust test) says what the upstream answers each turn: text, tool calls, and usage as the
upstream counted it (input without cache, cache read, cache write, output). Each client must see it
in its own protocol's convention: Anthropic's `input_tokens` exclude cached input; Chat's
`prompt_tokens` and Responses' `input_tokens` include it.

Scenarios (the upstream requests they make, in order):
  conversation           3: a text turn; then, with the first exchange as history, a question that
                         gets text and a tool call; then the tool result, which gets the final text.
  parallel_tools         2: a question answered with two tool calls and no text; then both results.
  stream_conversation,   the same, streamed, with the SDKs' stream helpers accumulating the events.
  stream_parallel_tools
Gemini only:
  count_tokens           1 or 0: `countTokens`, counted upstream or estimated (MATRIX_SPEC.gemini.count).
  error                  1: the upstream answers 400; the SDK raises ClientError.
  stream_error           1: the upstream's stream is cut after its first text; the SDK raises.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

from common import check, eq, gateway_url, raises, run

URL = gateway_url()
if len(sys.argv) < 3:
    sys.exit(f"usage: {sys.argv[0]} GATEWAY_URL CLIENT_KIND SCENARIO...")
KIND = sys.argv.pop(2)  # common.run reads the scenarios from sys.argv[2:]
SPEC: Dict[str, Any] = json.loads(os.environ["MATRIX_SPEC"])
TOOL = SPEC["tool"]
SYSTEM = SPEC["system"]

Turn = Dict[str, Any]


def total_input(u: Dict[str, int]) -> int:
    return u["input"] + u["cache_read"] + u["cache_write"]


def want_calls(turn: Turn) -> List[Any]:
    return [(t["name"], t["arguments"]) for t in turn["tools"]]


_reported = set()


def violation(bug: str, message: str) -> None:
    """A protocol violation: a failure, unless the Rust test lists it as a known gateway bug for
    this cell (MATRIX_SPEC.known_bugs), in which case it is reported on stdout (`known bug: ...`)
    for the test to check that it is still there."""
    if bug not in SPEC.get("known_bugs", []):
        check(False, f"{bug}: {message}")
    if bug not in _reported:
        _reported.add(bug)
        print(f"known bug: {bug}: {message}", flush=True)


def check_sequential(opened: List[int], event: str, index: int, label: str, starts: bool) -> None:
    """The real APIs stream one content block / output item at a time: each is closed before the
    next one opens. `opened` holds the open indexes."""
    if starts:
        if opened:
            violation("overlapping_blocks", f"{label}: {event} for index {index} while index {opened} is still open")
        opened.append(index)
    elif index in opened:
        opened.remove(index)


def tool_output(arguments: Dict[str, Any]) -> str:
    """What the tool answers (the application's side of the round trip)."""
    return SPEC["tool_results"][arguments["city"]]


class Anthropic:
    """Messages: history as `messages` with the returned content blocks; system as `system`."""

    def __init__(self, stream: bool) -> None:
        import anthropic
        self.sdk = anthropic
        self.stream = stream
        self.client = anthropic.Anthropic(base_url=URL, api_key="sk-ant-client-key-not-forwarded", max_retries=0,
                                          timeout=30, http_client=anthropic.DefaultHttpxClient(trust_env=False))
        self.tools = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}]

    def start(self, question: str) -> List[Any]:
        return [{"role": "user", "content": question}]

    def user(self, question: str) -> List[Any]:
        return [{"role": "user", "content": question}]

    def ask(self, history: List[Any], with_tools: bool, turn: Turn, label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="claude-sonnet-4-5", max_tokens=1024, system=SYSTEM, messages=history)
        if with_tools:
            kwargs["tools"] = self.tools
        if not self.stream:
            msg = self.client.messages.create(**kwargs)
        else:
            texts: List[str] = []
            partial_json: Dict[int, str] = {}
            types: List[str] = []
            opened: List[int] = []
            with self.client.messages.stream(**kwargs) as s:
                for event in s:
                    types.append(event.type)
                    if event.type in ("content_block_start", "content_block_stop"):
                        check_sequential(opened, event.type, event.index, label, event.type == "content_block_start")
                    if event.type == "text":
                        texts.append(event.text)
                    elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        partial_json[event.index] = partial_json.get(event.index, "") + event.delta.partial_json
                msg = s.get_final_message()
            eq(types[0], "message_start", f"{label}: first event")
            eq(types[-1], "message_stop", f"{label}: last event")
            eq("".join(texts), turn["text"], f"{label}: text events")
            eq([json.loads(p) for p in partial_json.values()], [a for _, a in want_calls(turn)],
               f"{label}: input_json_delta events by block")
        check(isinstance(msg, self.sdk.types.Message), f"{label}: not a Message: {type(msg)}")
        check(bool(msg.id), f"{label}: id {msg.id!r}")
        eq(msg.model, SPEC["upstream_model"], f"{label}: model")
        eq(msg.role, "assistant", f"{label}: role")
        want_types = (["text"] if turn["text"] else []) + ["tool_use"] * len(turn["tools"])
        eq([b.type for b in msg.content], want_types, f"{label}: content block types")
        eq("".join(b.text for b in msg.content if b.type == "text"), turn["text"], f"{label}: text")
        calls = [b for b in msg.content if b.type == "tool_use"]
        eq([(c.name, c.input) for c in calls], want_calls(turn), f"{label}: tool_use blocks")
        check(all(c.id for c in calls) and len({c.id for c in calls}) == len(calls), f"{label}: tool_use ids")
        eq(msg.stop_reason, "tool_use" if calls else "end_turn", f"{label}: stop_reason")
        u = turn["usage"]
        eq((msg.usage.input_tokens, msg.usage.cache_read_input_tokens or 0,
            msg.usage.cache_creation_input_tokens or 0, msg.usage.output_tokens),
           (u["input"], u["cache_read"], u["cache_write"], u["output"]),
           f"{label}: usage (input, cache read, cache write, output)")
        return msg

    def assistant(self, msg: Any) -> List[Any]:
        return [{"role": "assistant", "content": msg.content}]

    def results(self, msg: Any) -> List[Any]:
        return [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": tool_output(b.input)}
            for b in msg.content if b.type == "tool_use"]}]


class Chat:
    """Chat Completions: system as the first message; history as messages, `tool` messages."""

    def __init__(self, stream: bool) -> None:
        import openai
        self.sdk = openai
        self.stream = stream
        self.client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-proj-client-key-not-forwarded", max_retries=0,
                                    timeout=30, http_client=openai.DefaultHttpxClient(trust_env=False))
        self.tools = [{"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                                        "parameters": TOOL["parameters"]}}]

    def start(self, question: str) -> List[Any]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]

    def user(self, question: str) -> List[Any]:
        return [{"role": "user", "content": question}]

    def ask(self, history: List[Any], with_tools: bool, turn: Turn, label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="gpt-4o-mini", messages=history)
        if with_tools:
            kwargs["tools"] = self.tools
        if not self.stream:
            c = self.client.chat.completions.create(**kwargs)
            check(isinstance(c, self.sdk.types.chat.ChatCompletion), f"{label}: not a ChatCompletion: {type(c)}")
        else:
            deltas, args_done, ids = [], [], set()
            with self.client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
                for event in s:
                    if event.type == "chunk":
                        ids.add(event.chunk.id)
                    elif event.type == "content.delta":
                        deltas.append(event.delta)
                    elif event.type == "tool_calls.function.arguments.done":
                        args_done.append((event.name, json.loads(event.arguments)))
                c = s.get_final_completion()
            eq(len(ids), 1, f"{label}: one id across the chunks")
            eq("".join(deltas), turn["text"], f"{label}: content.delta events")
            eq(args_done, want_calls(turn), f"{label}: tool_calls.function.arguments.done events")
        check(bool(c.id), f"{label}: id {c.id!r}")
        eq(c.model, SPEC["upstream_model"], f"{label}: model")
        eq(len(c.choices), 1, f"{label}: choices")
        msg = c.choices[0].message
        eq(msg.role, "assistant", f"{label}: role")
        eq(msg.content or "", turn["text"], f"{label}: content")
        calls = msg.tool_calls or []
        eq([(t.type, t.function.name, json.loads(t.function.arguments)) for t in calls],
           [("function", n, a) for n, a in want_calls(turn)], f"{label}: tool_calls")
        check(all(t.id for t in calls) and len({t.id for t in calls}) == len(calls), f"{label}: tool call ids")
        eq(c.choices[0].finish_reason, "tool_calls" if calls else "stop", f"{label}: finish_reason")
        u = turn["usage"]
        check(c.usage is not None, f"{label}: no usage")
        cached = c.usage.prompt_tokens_details.cached_tokens if c.usage.prompt_tokens_details else None
        eq((c.usage.prompt_tokens, cached or 0, c.usage.completion_tokens, c.usage.total_tokens),
           (total_input(u), u["cache_read"], u["output"], total_input(u) + u["output"]),
           f"{label}: usage (prompt, cached, completion, total)")
        return c

    def assistant(self, c: Any) -> List[Any]:
        """As the docs show it, the message object itself; for an accumulated stream, the plain dict
        a caller builds from it."""
        msg = c.choices[0].message
        if not self.stream:
            return [msg]
        out: Dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            out["tool_calls"] = [{"id": t.id, "type": "function",
                                  "function": {"name": t.function.name, "arguments": t.function.arguments}}
                                 for t in msg.tool_calls]
        return [out]

    def results(self, c: Any) -> List[Any]:
        return [{"role": "tool", "tool_call_id": t.id, "content": tool_output(json.loads(t.function.arguments))}
                for t in c.choices[0].message.tool_calls]


class Responses:
    """Responses: system as `instructions`; history as the earlier output items themselves."""

    def __init__(self, stream: bool) -> None:
        import openai
        self.sdk = openai
        self.stream = stream
        self.client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-proj-client-key-not-forwarded", max_retries=0,
                                    timeout=30, http_client=openai.DefaultHttpxClient(trust_env=False))
        self.tools = [{"type": "function", "name": TOOL["name"], "description": TOOL["description"],
                       "parameters": TOOL["parameters"], "strict": False}]

    def start(self, question: str) -> List[Any]:
        return [{"role": "user", "content": question}]

    def user(self, question: str) -> List[Any]:
        return [{"role": "user", "content": question}]

    def ask(self, history: List[Any], with_tools: bool, turn: Turn, label: str) -> Any:
        kwargs: Dict[str, Any] = dict(model="gpt-4.1", instructions=SYSTEM, input=history)
        if with_tools:
            kwargs["tools"] = self.tools
        if not self.stream:
            r = self.client.responses.create(**kwargs)
        else:
            deltas, args_done, seq, types = [], [], [], []
            opened: List[int] = []
            with self.client.responses.stream(**kwargs) as s:
                for event in s:
                    seq.append(event.sequence_number)
                    types.append(event.type)
                    if event.type in ("response.output_item.added", "response.output_item.done"):
                        check_sequential(opened, event.type, event.output_index, label,
                                         event.type == "response.output_item.added")
                    if event.type == "response.output_text.delta":
                        deltas.append(event.delta)
                    elif event.type == "response.function_call_arguments.done":
                        args_done.append(json.loads(event.arguments))
                r = s.get_final_response()
            eq(seq, list(range(len(seq))), f"{label}: sequence numbers")
            eq((types[0], types[-1]), ("response.created", "response.completed"), f"{label}: first and last events")
            eq("".join(deltas), turn["text"], f"{label}: output_text.delta events")
            eq(args_done, [a for _, a in want_calls(turn)], f"{label}: function_call_arguments.done events")
        check(isinstance(r, self.sdk.types.responses.Response), f"{label}: not a Response: {type(r)}")
        check(bool(r.id), f"{label}: id {r.id!r}")
        eq(r.status, "completed", f"{label}: status")
        eq(r.model, SPEC["upstream_model"], f"{label}: model")
        eq(r.output_text, turn["text"], f"{label}: output_text")
        want_types = (["message"] if turn["text"] else []) + ["function_call"] * len(turn["tools"])
        eq([o.type for o in r.output], want_types, f"{label}: output item types")
        calls = [o for o in r.output if o.type == "function_call"]
        eq([(o.name, json.loads(o.arguments)) for o in calls], want_calls(turn), f"{label}: function_call items")
        check(all(o.call_id for o in calls) and len({o.call_id for o in calls}) == len(calls), f"{label}: call ids")
        u = turn["usage"]
        cached = r.usage.input_tokens_details.cached_tokens if r.usage.input_tokens_details else None
        eq((r.usage.input_tokens, cached or 0, r.usage.output_tokens, r.usage.total_tokens),
           (total_input(u), u["cache_read"], u["output"], total_input(u) + u["output"]),
           f"{label}: usage (input, cached, output, total)")
        return r

    def assistant(self, r: Any) -> List[Any]:
        return list(r.output)

    def results(self, r: Any) -> List[Any]:
        return [{"type": "function_call_output", "call_id": o.call_id, "output": tool_output(json.loads(o.arguments))}
                for o in r.output if o.type == "function_call"]


class Gemini:
    """The Google GenAI SDK (`google-genai`) on the Gemini API: system as `system_instruction`;
    history as `Content`s, the model's own returned `Content` (thought signatures included), the
    results as `function_response` parts with the calls' ids."""

    def __init__(self, stream: bool) -> None:
        from google import genai
        from google.genai import types
        self.types = types
        self.stream = stream
        options = types.HttpOptions(base_url=URL, api_version="v1beta", timeout=30_000,
                                    client_args={"trust_env": False})
        self.client = genai.Client(api_key="AIza-client-key-not-forwarded", http_options=options)
        self.tools = [types.Tool(function_declarations=[types.FunctionDeclaration(
            name=TOOL["name"], description=TOOL["description"], parameters_json_schema=TOOL["parameters"])])]

    def start(self, question: str) -> List[Any]:
        return self.user(question)

    def user(self, question: str) -> List[Any]:
        return [self.types.Content(role="user", parts=[self.types.Part(text=question)])]

    def config(self, with_tools: bool) -> Any:
        t = self.types
        return t.GenerateContentConfig(
            system_instruction=SYSTEM, tools=self.tools if with_tools else None,
            automatic_function_calling=t.AutomaticFunctionCallingConfig(disable=True))

    def ask(self, history: List[Any], with_tools: bool, turn: Turn, label: str) -> Any:
        t = self.types
        kwargs = dict(model=SPEC["gemini"]["model"], contents=history, config=self.config(with_tools))
        if not self.stream:
            r = self.client.models.generate_content(**kwargs)
            check(isinstance(r, t.GenerateContentResponse), f"{label}: not a GenerateContentResponse: {type(r)}")
            content = r.candidates[0].content
            last = r
        else:
            chunks = list(self.client.models.generate_content_stream(**kwargs))
            check(len(chunks) > 1 or not turn["text"], f"{label}: {len(chunks)} chunk(s)")
            ids = {c.response_id for c in chunks}
            eq(len(ids), 1, f"{label}: one responseId across the chunks")
            finishes = [c.candidates[0].finish_reason for c in chunks if c.candidates and c.candidates[0].finish_reason]
            eq(len(finishes), 1, f"{label}: one chunk with a finishReason")
            last = chunks[-1]
            check(last.candidates[0].finish_reason is not None, f"{label}: the finishReason comes last")
            # What an application keeps of a stream: the text joined, the calls as they came.
            parts: List[Any] = []
            text = "".join(p.text for c in chunks if c.candidates and c.candidates[0].content
                           for p in (c.candidates[0].content.parts or []) if p.text and not p.thought)
            eq("".join(c.text or "" for c in chunks if not c.function_calls), text, f"{label}: chunk texts")
            if text:
                parts.append(t.Part(text=text))
            parts += [p for c in chunks if c.candidates and c.candidates[0].content
                      for p in (c.candidates[0].content.parts or []) if p.function_call]
            content = t.Content(role="model", parts=parts)
            r = last
        check(bool(last.response_id), f"{label}: responseId {last.response_id!r}")
        eq(last.model_version, SPEC["upstream_model"], f"{label}: modelVersion")
        eq(content.role, "model", f"{label}: role")
        got_text = "".join(p.text for p in content.parts or [] if p.text and not p.thought)
        eq(got_text, turn["text"], f"{label}: text")
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        eq([(c.name, c.args) for c in calls], want_calls(turn), f"{label}: function calls")
        check(all(c.id for c in calls) and len({c.id for c in calls}) == len(calls), f"{label}: call ids")
        eq(last.candidates[0].finish_reason, t.FinishReason.STOP, f"{label}: finishReason")
        u, m = turn["usage"], last.usage_metadata
        check(m is not None, f"{label}: no usageMetadata")
        eq((m.prompt_token_count, m.cached_content_token_count or 0, m.candidates_token_count, m.total_token_count),
           (total_input(u), u["cache_read"], u["output"], total_input(u) + u["output"]),
           f"{label}: usage (prompt, cached, candidates, total)")
        return content

    def assistant(self, content: Any) -> List[Any]:
        return [content]

    def results(self, content: Any) -> List[Any]:
        t = self.types
        return [t.Content(role="user", parts=[
            t.Part(function_response=t.FunctionResponse(id=p.function_call.id, name=p.function_call.name,
                                                        response={"output": tool_output(p.function_call.args)}))
            for p in content.parts if p.function_call])]


CLIENTS = {"anthropic": Anthropic, "openai-chat": Chat, "openai-responses": Responses, "gemini": Gemini}
if KIND not in CLIENTS:
    sys.exit(f"unknown client kind {KIND!r}; known: {sorted(CLIENTS)}")


def conversation(stream: bool) -> None:
    c = CLIENTS[KIND](stream)
    hello, tool_turn, final = SPEC["turns"]
    what = "stream" if stream else "create"
    history = c.start(SPEC["questions"][0])
    r1 = c.ask(history, False, hello, f"{what} turn 1")
    history += c.assistant(r1) + c.user(SPEC["questions"][1])
    r2 = c.ask(history, True, tool_turn, f"{what} turn 2 (tool call)")
    history += c.assistant(r2) + c.results(r2)
    c.ask(history, True, final, f"{what} turn 3 (after the tool result)")


def parallel_tools(stream: bool) -> None:
    c = CLIENTS[KIND](stream)
    calls, final = SPEC["parallel_turns"]
    what = "stream" if stream else "create"
    history = c.start(SPEC["questions"][2])
    r1 = c.ask(history, True, calls, f"{what} parallel tool calls")
    history += c.assistant(r1) + c.results(r1)
    c.ask(history, True, final, f"{what} after both tool results")


def count_tokens() -> None:
    """Gemini: `countTokens`, counted by the upstream (`count`) or estimated by the gateway."""
    c = Gemini(False)
    r = c.client.models.count_tokens(model=SPEC["gemini"]["model"], contents=c.user(SPEC["questions"][1]))
    want = SPEC["gemini"]["count"]
    if want is None:
        check(isinstance(r.total_tokens, int) and r.total_tokens > 0, f"estimated totalTokens {r.total_tokens!r}")
    else:
        eq(r.total_tokens, want, "totalTokens")


def error() -> None:
    """Gemini: an upstream error, in Gemini's shape, raises the SDK's ClientError."""
    from google.genai import errors
    c = Gemini(False)
    e = raises(errors.ClientError, lambda: c.client.models.generate_content(
        model=SPEC["gemini"]["model"], contents=c.user(SPEC["questions"][0])), "a 400 from the upstream")
    eq((e.code, e.status), (400, "INVALID_ARGUMENT"), "the error's code and status")
    check(SPEC["gemini"]["error"] in (e.message or ""), f"the upstream's message in {e.message!r}")


def stream_error() -> None:
    """Gemini: a stream cut after its first text ends with the error chunk, which the SDK raises."""
    from google.genai import errors
    c = Gemini(True)
    seen: List[str] = []

    def read() -> None:
        for chunk in c.client.models.generate_content_stream(
                model=SPEC["gemini"]["model"], contents=c.user(SPEC["questions"][0])):
            seen.append(chunk.text or "")

    raises(errors.APIError, read, "a stream cut mid-answer")
    eq("".join(seen), SPEC["gemini"]["partial"], "the text before the error")


run({
    "conversation": lambda: conversation(False),
    "stream_conversation": lambda: conversation(True),
    "parallel_tools": lambda: parallel_tools(False),
    "stream_parallel_tools": lambda: parallel_tools(True),
    "count_tokens": count_tokens,
    "error": error,
    "stream_error": stream_error,
})
