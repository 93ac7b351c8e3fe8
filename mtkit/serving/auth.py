"""API-key checks: an ``api_key`` field (LibreTranslate's way), an ``X-API-Key`` header, a bearer token or DeepL's
``Authorization: DeepL-Auth-Key KEY``."""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi import Request

from mtkit.serving.errors import ApiError


def header_key(request: Request) -> Optional[str]:
    """The key in ``X-API-Key``, else in ``Authorization: Bearer ...`` or ``Authorization: DeepL-Auth-Key ...``;
    None without any."""
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    return request.headers.get("x-api-key") or (given if scheme.lower() in ("bearer", "deepl-auth-key") else None)


class ApiKey:
    """The server's key; None lets every request through.

    Args:
        key: the key requests must give, or None.
    """

    def __init__(self, key: Optional[str] = None):
        self.key = key

    def check(self, given: Optional[str]) -> None:
        """Accept ``given`` if it is the key.

        Raises:
            ApiError: 403 when a key is set and ``given`` is not it.
        """
        if self.key is None:
            return
        # compare_digest: the time taken does not tell how much of a guess was right
        if not given or not hmac.compare_digest(given.encode(), self.key.encode()):
            raise ApiError(403, "a valid API key is required (api_key, or the X-API-Key header)")

    def check_fields(self, fields: dict, request: Request) -> None:
        """Check LibreTranslate's way: the ``api_key`` field first (an empty or non-string one counts as not
        given, a field's type being checked with the other fields), else the headers' key.

        Raises:
            ApiError: 403 as ``check``.
        """
        given = fields.get("api_key")
        self.check(given if isinstance(given, str) and given else header_key(request))

    async def require(self, request: Request) -> None:
        """A route dependency checking the headers' key: it runs before the body is validated.

        Raises:
            ApiError: 403 as ``check``.
        """
        # async: FastAPI would run a plain function on a worker thread
        self.check(header_key(request))
