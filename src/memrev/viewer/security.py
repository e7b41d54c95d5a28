"""Who may talk to the viewer, and what a page may do once loaded.

- Bound to loopback (the default) and without a token, requests must name a
  loopback host in ``Host``: a web page elsewhere cannot reach the viewer by
  pointing its own domain at 127.0.0.1 (DNS rebinding).
- Any other bind needs a token; every request then carries it, as
  ``Authorization: Bearer T`` (scripts) or the HttpOnly cookie that
  ``?token=T`` sets once (browsers; the token is dropped from the URL by a
  redirect so it stays out of history and Referer headers).
- Every response forbids inline script, framing and outside resources; the
  viewer's own JavaScript and CSS are files under ``/static``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import MemrevError

COOKIE = "memrev_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
LOOPBACK_NAMES = {"localhost"}


class TokenRequired(MemrevError, PermissionError):
    """``memrev serve`` on a non-loopback address without ``--token``/``MEMREV_TOKEN``."""


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token."""
    if not is_loopback(host) and not token:
        raise TokenRequired(f"serving on {host} (not loopback) needs --token or MEMREV_TOKEN")


def _host_of(header: str) -> str:
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token is None:
            if not is_loopback(_host_of(headers.get("host", ""))):
                await _plain(send, 421, "this viewer answers only to localhost names (start it with --token to serve others)")
                return
        else:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query:
                await self._login(scope, send, query)
                return
            if not self._authorized(headers):
                await _plain(send, 401, "a token is required: Authorization: Bearer TOKEN, or open ?token=TOKEN once")
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)

    def _matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token.encode())  # type: ignore[union-attr]

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        # the header's value is bytes (decoded above as latin-1, which keeps each byte): compare them with
        # the token's UTF-8, as ?token= is compared after percent-decoding as UTF-8
        if auth.lower().startswith("bearer ") and hmac.compare_digest(
                auth[7:].strip().encode("latin-1"), self.token.encode()):  # type: ignore[union-attr]
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed Cookie header is the same as none
            return False
        return COOKIE in cookie and hmac.compare_digest(cookie[COOKIE].value.encode(), self._cookie_value().encode())

    def _cookie_value(self) -> str:
        # the cookie holds a digest of the token, never the token (any characters, never echoed)
        return hashlib.sha256(b"memrev-viewer\0" + self.token.encode()).hexdigest()  # type: ignore[union-attr]

    async def _login(self, scope: Scope, send: Send, query: dict[str, str]) -> None:
        if not self._matches(query.pop("token")):
            await _plain(send, 401, "wrong token")
            return
        # "/" + lstrip: a path like //elsewhere.example must not become an off-site redirect
        target = "/" + quote(scope["path"].lstrip("/")) + ("?" + urlencode(query) if query else "")
        cookie = f"{COOKIE}={self._cookie_value()}; HttpOnly; SameSite=Strict; Path=/"
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", target.encode()), (b"set-cookie", cookie.encode()), *HEADERS]})
        await send({"type": "http.response.body", "body": b""})


async def _plain(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *HEADERS]})
    await send({"type": "http.response.body", "body": text.encode()})
