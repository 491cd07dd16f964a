"""Who answers a prediction request: pykatalyst's forecaster in process (the default), or
a prediction service at an address (Katalyst's
`--spd-resource-portrait-indicator-plugin-algorithm-serving-address`), posted to
`<address>/openapi/tsa/predict` as Katalyst posts it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol

from pykatalyst.api import names
from pykatalyst.extras import MissingExtra
from pykatalyst.predict.contract import (
    ContractError,
    PredictReply,
    answer,
    parse_reply,
    parse_request,
)

DEFAULT_TIMEOUT_S = 120.0  # Katalyst's algorithmServingTimeout
MAX_REPLY_BYTES = 64 * 1024 * 1024


class PredictorError(RuntimeError):
    """The predictor could not answer; the message says why."""


class Predictor(Protocol):
    name: str

    def predict(self, request: dict[str, Any]) -> PredictReply: ...


class InProcessPredictor:
    name = "built-in"

    def predict(self, request: dict[str, Any]) -> PredictReply:
        try:
            reply, _ = answer(parse_request(request))
            return parse_reply(reply)
        except (ContractError, MissingExtra) as exc:
            raise PredictorError(str(exc)) from None


class HTTPPredictor:
    """A user's prediction service. A timeout, an HTTP error or a reply that is not the
    contract's is a PredictorError naming the address and what was wrong."""

    def __init__(self, address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not address.startswith(("http://", "https://")):
            raise ValueError(f"predictor address {address!r}: expected http:// or https://")
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self.name = self.address

    def predict(self, request: dict[str, Any]) -> PredictReply:
        url = self.address + names.PREDICT_PATH
        data = json.dumps(request).encode()
        req = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            text = exc.read(512).decode(errors="replace")
            raise PredictorError(f"{url}: HTTP {exc.code}: {text}") from None
        except TimeoutError:
            raise PredictorError(f"{url}: no reply within {self.timeout_s:g}s") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise PredictorError(f"{url}: no reply within {self.timeout_s:g}s") from None
            raise PredictorError(f"{url}: {reason}") from None
        if len(body) > MAX_REPLY_BYTES:
            raise PredictorError(f"{url}: reply larger than {MAX_REPLY_BYTES} bytes")
        try:
            return parse_reply(json.loads(body))
        except (ValueError, ContractError) as exc:
            raise PredictorError(f"{url}: {exc}") from None


def predictor_for(address: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Predictor:
    return HTTPPredictor(address, timeout_s) if address else InProcessPredictor()
