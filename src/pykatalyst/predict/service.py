"""The predictor as an HTTP service: `POST /openapi/tsa/predict` with Katalyst's request,
answered with its reply (a bad request gets HTTP 400 with `Msg` saying which field)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from pykatalyst.api import names
from pykatalyst.predict.contract import ContractError, answer, parse_request

MAX_BODY_BYTES = 64 * 1024 * 1024


async def _predict(request: web.Request) -> web.Response:
    try:
        body = json.loads(await request.read())
        req = parse_request(body)
    except (ValueError, ContractError) as exc:
        return web.json_response({"Code": 400, "Msg": str(exc)}, status=400)
    reply, _ = await asyncio.to_thread(answer, req)
    return web.json_response(reply)


def predict_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(names.PREDICT_PATH, _predict)
    return app
