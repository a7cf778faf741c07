"""The official `openai` SDK against ccmesh's /v1/chat/completions (scripted by tests/it/sdk_clients.rs).

The expected values below are the ones the Rust test scripts the mock upstream with.
"""

from __future__ import annotations

import json

import openai

from common import capture_hook, check, eq, gateway_url, raises, run

MODEL = "gpt-4o-mini"
UPSTREAM_MODEL = "gpt-4o-mini-2024-07-18"
USER = [{"role": "user", "content": "Say hello"}]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"],
            },
        },
    }
]
CALL_ID = "call_Xq4bZ0cS1mW8mQ3kC2pT7aNd"

client = openai.OpenAI(
    base_url=gateway_url() + "/v1",
    api_key="sk-proj-client-key-not-forwarded",
    max_retries=0,
    timeout=30,
    http_client=openai.DefaultHttpxClient(trust_env=False, event_hooks={"request": [capture_hook]}),
)


def completion() -> None:
    c = client.chat.completions.create(model=MODEL, messages=USER)
    check(isinstance(c, openai.types.chat.ChatCompletion), f"not a ChatCompletion: {type(c)}")
    eq(c.model, UPSTREAM_MODEL, "model")
    eq(len(c.choices), 1, "choices")
    eq(c.choices[0].message.role, "assistant", "role")
    eq(c.choices[0].message.content, "Hello from ccmesh", "content")
    eq(c.choices[0].finish_reason, "stop", "finish_reason")
    eq((c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens), (12, 8, 20), "usage")
    check(bool(c._request_id) and c._request_id.startswith("req_"), f"request id {c._request_id!r}")


def stream() -> None:
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=USER, stream=True, stream_options={"include_usage": True}))
    check(all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks), "not all ChatCompletionChunk")
    eq(len({c.id for c in chunks}), 1, "one id across chunks")
    eq(chunks[0].choices[0].delta.role, "assistant", "first delta role")
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    eq(content, ["Hel", "lo, ", "wörld"], "content deltas")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    eq(finishes, ["stop"], "finish reasons")
    last = chunks[-1]
    eq(last.choices, [], "usage chunk choices")
    check(last.usage is not None, "usage chunk missing")
    eq((last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens), (12, 8, 20), "usage")


def tool_calls() -> None:
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    c = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS)
    choice = c.choices[0]
    eq(choice.finish_reason, "tool_calls", "finish_reason")
    eq(choice.message.content, None, "content")
    eq(len(choice.message.tool_calls or []), 1, "tool_calls")
    call = choice.message.tool_calls[0]
    eq((call.id, call.type, call.function.name), (CALL_ID, "function", "get_weather"), "tool call")
    eq(json.loads(call.function.arguments), {"city": "Paris", "unit": "celsius"}, "arguments")

    # The tool turn, the way the SDK's docs show it: the assistant message object as returned.
    answer = client.chat.completions.create(
        model=MODEL,
        tools=TOOLS,
        messages=[
            *question,
            choice.message,
            {"role": "tool", "tool_call_id": call.id, "content": "18°C, sunny"},
        ],
    )
    eq(answer.choices[0].finish_reason, "stop", "final finish_reason")
    eq(answer.choices[0].message.content, "It is 18°C and sunny in Paris.", "final content")


def bad_request() -> None:
    e = raises(openai.BadRequestError,
               lambda: client.chat.completions.create(model=MODEL, messages=USER, temperature=5), "upstream 400")
    eq(e.status_code, 400, "status")
    eq(e.type, "invalid_request_error", "error type")
    eq(e.body["message"], "Invalid 'temperature': decimal above maximum value.", "error message")
    check("decimal above maximum value" in e.message, f"message: {e.message}")


def unknown_model() -> None:
    e = raises(openai.NotFoundError,
               lambda: client.chat.completions.create(model="claude-3-opus", messages=USER), "unknown model")
    eq(e.status_code, 404, "status")
    eq(e.code, "model_not_found", "error code")
    check("no enabled endpoint serves model 'claude-3-opus'" in e.body["message"], f"message: {e.message}")


def rate_limited() -> None:
    def ask():
        return client.chat.completions.create(model="limited-model", messages=USER)

    # The upstream answers 429 (Retry-After: 30), which trips the endpoint's breaker
    # (failure_threshold 1). SPEC §3 says this request gets the upstream's own 429 back (the
    # attempt was no half-open probe); ccmesh currently answers with its own rate_limit_error
    # (reported as a deviation), so only what both share is checked here ...
    first = raises(openai.RateLimitError, ask, "first request (upstream 429)")
    eq(first.status_code, 429, "first status")
    eq(first.response.headers.get("retry-after"), "30", "first retry-after")
    print(f"first 429: {first.body!r}", flush=True)
    # ... so the next request is refused by the gateway itself: the cooldown outlasts the
    # 5 s backoff budget.
    e = raises(openai.RateLimitError, ask, "second request (gateway 429)")
    eq(e.status_code, 429, "status")
    eq((e.type, e.code), ("rate_limit_error", "rate_limited"), "error type and code")
    check("rate-limited" in e.body["message"], f"gateway message: {e.body!r}")
    retry_after = e.response.headers.get("retry-after")
    check(retry_after is not None and retry_after.isdigit() and 25 <= int(retry_after) <= 30,
          f"retry-after header: {retry_after!r}")
    eq(e.response.headers.get("x-ccmesh-attempts"), "0", "x-ccmesh-attempts")


def stream_converted() -> None:
    # Served by an Anthropic-format endpoint: the gateway converts the stream to Chat chunks.
    chunks = list(client.chat.completions.create(
        model="claude-via-chat", messages=USER, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    eq(text, "Converted hello", "content")
    usage = [c.usage for c in chunks if c.usage]
    eq(len(usage), 1, "one usage chunk")
    eq((usage[0].prompt_tokens, usage[0].completion_tokens), (12, 8), "usage")


def cut_stream() -> None:
    content = []

    def consume() -> None:
        for c in client.chat.completions.create(
                model=MODEL, messages=USER, stream=True, stream_options={"include_usage": True}):
            if c.choices and c.choices[0].delta.content:
                content.append(c.choices[0].delta.content)

    e = raises(openai.APIError, consume, "stream cut mid-way")
    # The error chunk arrives on a 200 response: the SDK raises the base APIError.
    eq(type(e), openai.APIError, "exception type")
    eq(content, ["Hel"], "content received before the cut")
    check("mid-stream" in e.message, f"exception message: {e.message}")
    eq((e.type, e.code), ("server_error", "upstream_stream_error"), "error type and code")


def models_list() -> None:
    models = list(client.models.list())
    eq([m.id for m in models], ["gpt-4o-mini-2024-07-18", "gpt-4o", "claude-via-chat"],
       "model ids (the upstream's, filtered by gpt-*; then the Anthropic endpoint's concrete one)")
    check(all(isinstance(m, openai.types.Model) for m in models), f"not Model: {models!r}")
    eq(models[0].owned_by, "chat-main", "owned_by")
    eq(models[0].model_extra.get("ccmesh_endpoints"), ["chat-main"], "the endpoints serving it")


run({
    "models_list": models_list,
    "completion": completion,
    "stream": stream,
    "tool_calls": tool_calls,
    "bad_request": bad_request,
    "unknown_model": unknown_model,
    "rate_limited": rate_limited,
    "cut_stream": cut_stream,
    "stream_converted": stream_converted,
})
