"""Recommenders by name: the values of ``algorithmPolicy.recommender`` pykatalyst serves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pykatalyst.recommend.ensemble import PykatalystRecommender
from pykatalyst.recommend.katalyst import KatalystRecommender
from pykatalyst.recommend.model import CurrentResources, OOMEvent, Recommendation, UsageSeries


class Recommender(Protocol):
    """A pure recommender: the same series, time and settings give the same answer."""

    name: str

    @property
    def settings_type(self) -> type[Any]: ...

    def recommend(
        self,
        series: UsageSeries,
        now: float,
        settings: Any = None,
        oom_events: Sequence[OOMEvent] = (),
        current: CurrentResources | None = None,
    ) -> Recommendation: ...


_FACTORIES: dict[str, Callable[[], Recommender]] = {
    "katalyst": KatalystRecommender,
    "pykatalyst": PykatalystRecommender,
}
# ResourceRecommend's own spelling of its built-in percentile rule.
_ALIASES = {"": "katalyst", "default": "katalyst"}


def recommender_names() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def get_recommender(name: str) -> Recommender:
    """The recommender called ``name``; ``""`` and ``default`` are Katalyst's percentile rule."""
    key = _ALIASES.get(name, name)
    factory = _FACTORIES.get(key)
    if factory is None:
        accepted = ", ".join(recommender_names())
        raise ValueError(f"recommender {name!r} is not known: accepted: {accepted}")
    return factory()
