"""HTTP on the ASGI host: a framework-free ``HttpAnswer`` as a Starlette response, the
browser page and the inspection routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..admission import SessionGate
from ..connection import Connection
from ..hosting import HttpAnswer

__all__ = ["answering", "inspect_routes", "page_routes", "response"]


def response(answer: HttpAnswer) -> Response:
    headers = {**answer.headers, "content-type": answer.content_type}
    return Response(answer.body_bytes, status_code=answer.status, headers=headers)


def answering(answer: Callable[[Request], HttpAnswer]) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return response(answer(request))

    return route


def page_routes() -> list[BaseRoute]:
    from ..static import BUNDLE_ROUTE, PAGE_FILES

    package = files("rejoinder.io.static")
    routes: list[BaseRoute] = []
    for path, (name, media_type) in PAGE_FILES.items():
        if path == BUNDLE_ROUTE:
            continue  # looked for on each request, as the aiohttp app does
        body = package.joinpath(name).read_bytes()
        headers = {"Cache-Control": "no-cache"}
        answer = HttpAnswer(200, body, f"{media_type}; charset=utf-8", headers)
        routes.append(Route(path, answering(_constant(answer))))
    routes.append(Route(BUNDLE_ROUTE, answering(_bundle)))
    return routes


def _bundle(_request: Request) -> HttpAnswer:
    """The SDK bundle, read on each request (a rebuild is picked up), or a 404 that says
    how to build it."""
    from ..static import BUNDLE_MISSING, JAVASCRIPT, client_bundle

    body = client_bundle()
    if body is None:
        return HttpAnswer(404, (BUNDLE_MISSING + "\n").encode(), "text/plain; charset=utf-8", {})
    headers = {"Cache-Control": "no-cache"}
    return HttpAnswer(200, body, f"{JAVASCRIPT}; charset=utf-8", headers)


def _constant(answer: HttpAnswer) -> Callable[[Request], HttpAnswer]:
    return lambda _request: answer


def inspect_routes(gate: SessionGate[Connection]) -> list[BaseRoute]:
    from ..inspect import sessions_answer, timeline_answer

    def sessions(_request: Request) -> HttpAnswer:
        return sessions_answer(gate)

    def timeline(request: Request) -> HttpAnswer:
        wanted = request.path_params["id"]
        return timeline_answer(gate, wanted, request.query_params.get("since"))

    return [
        Route("/sessions", answering(sessions)),
        Route("/sessions/{id}/timeline", answering(timeline)),
    ]
