"""The OpenAI-compatible clients' HTTP side: the shared ``HTTPClient`` with the key and
base URL from ``_auth`` (``$OPENAI_API_KEY``, ``$OPENAI_BASE_URL``), sent as a bearer
token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import _http
from .._http import Failure, error_message_from_body, read_some
from .._retry import RetryPolicy
from .._timeout import Timeout
from ._auth import api_key_from, base_url_from

if TYPE_CHECKING:
    import aiohttp

__all__ = ["Failure", "HTTPClient", "error_message_from_body", "read_some"]


class HTTPClient(_http.HTTPClient):
    _name = "openai"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        timeout: Timeout | float | None,
        extra_headers: Mapping[str, str] | None,
        http_session: aiohttp.ClientSession | None,
        retry: RetryPolicy,
    ) -> None:
        super().__init__(
            api_key_from(api_key),
            base_url_from(base_url),
            timeout,
            extra_headers,
            http_session,
            retry,
        )
