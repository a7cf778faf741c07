"""Shared helpers for the scripts that tests/it/sdk_clients.rs runs against a real gateway.

A script is called as `python SCRIPT.py GATEWAY_URL SCENARIO...`. It runs the named scenarios in
order with the official SDK, printing `ok: SCENARIO` after each one that passed; on the first
failure it prints the scenario, the reason and a traceback to stderr and exits with status 1.

SDK_SCRIPT_TIMEOUT (seconds, default 120) bounds the whole run: past it, the script prints every
thread's traceback and exits.

When SDK_CAPTURE is set, every HTTP request the SDK sends is appended to that file as one JSON
line: {"scenario", "method", "path", "body_hex"}, the exact body bytes, so the Rust side can check
that the upstream received them unchanged.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import Any, Callable, Dict
from urllib.parse import urlsplit

_current = "(none)"


def gateway_url() -> str:
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} GATEWAY_URL SCENARIO...")
    return sys.argv[1].rstrip("/")


def capture_hook(request: Any) -> None:
    """An httpx request event hook recording what the SDK really sends."""
    path = os.environ.get("SDK_CAPTURE")
    if not path:
        return
    url = urlsplit(str(request.url))
    line = {
        "scenario": _current,
        "method": request.method,
        "path": url.path,
        "body_hex": bytes(request.content).hex(),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Mismatch(AssertionError):
    pass


def eq(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, want {want!r}")


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Mismatch(what)


def raises(exc_type: type, fn: Callable[[], Any], what: str) -> BaseException:
    """Runs fn, which must raise exactly an instance of exc_type (or a subclass); returns it."""
    try:
        result = fn()
    except BaseException as e:  # noqa: BLE001 - we report whatever it was
        if isinstance(e, exc_type):
            return e
        raise Mismatch(f"{what}: expected {exc_type.__module__}.{exc_type.__qualname__}, "
                       f"got {type(e).__module__}.{type(e).__qualname__}: {e}") from e
    raise Mismatch(f"{what}: expected {exc_type.__qualname__}, got a result: {result!r}")


def run(scenarios: Dict[str, Callable[[], None]]) -> None:
    global _current
    # A watchdog: a hung request fails the run with every thread's traceback instead of hanging it.
    faulthandler.dump_traceback_later(float(os.environ.get("SDK_SCRIPT_TIMEOUT", "120")), exit=True)
    names = sys.argv[2:]
    unknown = [n for n in names if n not in scenarios]
    if unknown or not names:
        sys.exit(f"unknown or no scenarios {unknown}; known: {sorted(scenarios)}")
    for name in names:
        _current = name
        try:
            scenarios[name]()
        except BaseException as e:  # noqa: BLE001
            print(f"FAILED scenario {name}: {type(e).__qualname__}: {e}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            sys.stdout.flush()
            sys.exit(1)
        print(f"ok: {name}", flush=True)
