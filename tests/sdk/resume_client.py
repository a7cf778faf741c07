"""The official SDKs read a stream that ccmesh resumed on another endpoint (tests/it/resume.rs).

    python resume_client.py GATEWAY_URL anthropic|chat|responses

RESUME_EXPECT (JSON, written by the Rust test): {"text": the whole answer the client must end up
with, "output_tokens": the output usage the final message must report, or null to skip}.

Each scenario streams one request with the SDK's own stream helper and checks that the SDK's
accumulated message is exactly the expected text, that the stream had exactly one start and one
terminal event, and that no error reached the SDK (it would raise).
"""

from __future__ import annotations

import json
import os

import anthropic
import openai

from common import capture_hook, check, eq, gateway_url, run

URL = gateway_url()
EXPECT = json.loads(os.environ["RESUME_EXPECT"])
USER = [{"role": "user", "content": "Tell me about foxes"}]


def http_client(module):
    return module.DefaultHttpxClient(trust_env=False, event_hooks={"request": [capture_hook]})


def anthropic_stream() -> None:
    client = anthropic.Anthropic(base_url=URL, api_key="sk-ant-client-key-0000", max_retries=0, timeout=30,
                                 http_client=http_client(anthropic))
    starts, stops, texts = 0, 0, []
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=USER) as s:
        for event in s:
            if event.type == "message_start":
                starts += 1
            elif event.type == "message_stop":
                stops += 1
            elif event.type == "text":
                texts.append(event.text)
        final = s.get_final_message()
    eq((starts, stops), (1, 1), "message_start and message_stop events")
    eq("".join(texts), EXPECT["text"], "accumulated text deltas")
    eq([b.type for b in final.content], ["text"], "final content blocks")
    eq(final.content[0].text, EXPECT["text"], "final message text")
    if EXPECT["output_tokens"] is not None:
        eq(final.usage.output_tokens, EXPECT["output_tokens"], "final output tokens")


def chat_stream() -> None:
    client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-client-key-0000", max_retries=0, timeout=30,
                           http_client=http_client(openai))
    texts, finishes, ids, usage = [], 0, set(), None
    stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                texts.append(choice.delta.content)
            if choice.finish_reason is not None:
                finishes += 1
    eq(finishes, 1, "chunks with a finish_reason")
    eq(len(ids), 1, f"chunk ids {ids}")
    eq("".join(texts), EXPECT["text"], "accumulated content")
    if EXPECT["output_tokens"] is not None:
        check(usage is not None, "no usage chunk")
        eq(usage.completion_tokens, EXPECT["output_tokens"], "completion tokens")


def responses_stream() -> None:
    client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-client-key-0000", max_retries=0, timeout=30,
                           http_client=http_client(openai))
    created, completed, texts = 0, 0, []
    with client.responses.stream(model="gpt-4.1", input="Tell me about foxes") as s:
        for event in s:
            if event.type == "response.created":
                created += 1
            elif event.type == "response.completed":
                completed += 1
            elif event.type == "response.output_text.delta":
                texts.append(event.delta)
        final = s.get_final_response()
    eq((created, completed), (1, 1), "response.created and response.completed events")
    eq("".join(texts), EXPECT["text"], "accumulated text deltas")
    eq(final.output_text, EXPECT["text"], "final output_text")
    if EXPECT["output_tokens"] is not None:
        eq(final.usage.output_tokens, EXPECT["output_tokens"], "final output tokens")


run({"anthropic": anthropic_stream, "chat": chat_stream, "responses": responses_stream})
