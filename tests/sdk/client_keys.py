"""The official `anthropic` and `openai` SDKs against a gateway with client keys (scripted by
tests/it/sdk_clients.rs). Each refusal must be the SDK's own exception: AuthenticationError (401),
PermissionDeniedError (403), RateLimitError (429); a spent budget is not retried
(x-should-retry: false), a rate limit is, after its Retry-After.

The keys come from the environment: SDK_KEY_OK (models claude-* and gpt-*), SDK_KEY_SLOW
(rpm 1, already used), SDK_KEY_BROKE (a spent budget).
"""

from __future__ import annotations

import os

import anthropic
import openai

from common import capture_hook, check, eq, gateway_url, raises, run

OK = os.environ["SDK_KEY_OK"]
SLOW = os.environ["SDK_KEY_SLOW"]
BROKE = os.environ["SDK_KEY_BROKE"]
USER = [{"role": "user", "content": "Say hello"}]


def claude(key: str, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gateway_url(),
        api_key=key,
        max_retries=retries,
        timeout=30,
        http_client=anthropic.DefaultHttpxClient(trust_env=False, event_hooks={"request": [capture_hook]}),
    )


def oai(key: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway_url() + "/v1",
        api_key=key,
        max_retries=retries,
        timeout=30,
        http_client=openai.DefaultHttpxClient(trust_env=False, event_hooks={"request": [capture_hook]}),
    )


def anthropic_refusals() -> None:
    e = raises(anthropic.AuthenticationError, lambda: claude("ccm-unknown").messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=USER), "unknown key")
    eq(e.status_code, 401, "status")
    check("not one this gateway knows" in str(e), str(e))
    e = raises(anthropic.PermissionDeniedError, lambda: claude(OK).messages.create(
        model="gemini-2.5-pro", max_tokens=8, messages=USER), "model outside the key's list")
    check(isinstance(e.body, dict), f"body {e.body!r}")
    eq(e.body.get("error", {}).get("type"), "permission_error", "error type")
    check("it may use: claude-*, gpt-*" in str(e), str(e))
    e = raises(anthropic.RateLimitError, lambda: claude(SLOW).messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=USER), "rpm")
    check("rpm limit" in str(e), str(e))
    check(int(e.response.headers["retry-after"]) >= 1, "retry-after")
    # A spent budget: a RateLimitError the SDK does not retry, even with retries allowed.
    e = raises(anthropic.RateLimitError, lambda: claude(BROKE, retries=2).messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=USER), "budget")
    eq(e.response.headers.get("x-should-retry"), "false", "x-should-retry")
    check("usd_per_day" in str(e), str(e))
    # The key's own answer still works.
    msg = claude(OK).messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=USER)
    eq(msg.content[0].text, "Hello from ccmesh", "text")


def openai_refusals() -> None:
    e = raises(openai.AuthenticationError, lambda: oai("ccm-unknown").chat.completions.create(
        model="gpt-4o", messages=USER), "unknown key")
    eq(e.code, "invalid_api_key", "code")
    e = raises(openai.PermissionDeniedError, lambda: oai(OK).chat.completions.create(
        model="gemini-2.5-pro", messages=USER), "model outside the key's list")
    eq(e.code, "permission_denied", "code")
    e = raises(openai.RateLimitError, lambda: oai(SLOW).chat.completions.create(
        model="gpt-4o", messages=USER), "rpm")
    eq(e.code, "rate_limit_exceeded", "code")
    e = raises(openai.RateLimitError, lambda: oai(BROKE, retries=2).responses.create(
        model="gpt-4o", input="hi"), "budget")
    eq(e.code, "insufficient_quota", "code")
    eq(e.type, "insufficient_quota", "type")
    eq(e.response.headers.get("x-should-retry"), "false", "x-should-retry")


run({"anthropic_refusals": anthropic_refusals, "openai_refusals": openai_refusals})
