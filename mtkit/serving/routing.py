"""Which models translate a request: each (source, target) pair goes to the model that serves it, or through a
pivot language where no model does but two chain (source -> pivot -> target, English first, then any language).

Two models may serve one pair only if both were named (in a models file): the first listed is the pair's default,
and ``/v1/translate`` may pick another with ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mtkit.errors import MtkitError
from mtkit.serving.errors import ApiError
from mtkit.serving.models import ModelSpec, Pair

PIVOT_FIRST = "en"  # the pivot language tried first


@dataclass(frozen=True)
class Leg:
    """One model's part of a route: it translates from ``source`` into ``target``."""

    model: str
    source: str
    target: str


Route = tuple[Leg, ...]  # one leg, two through a pivot language, or none: the source is the target language


class Router:
    """The routes of a server's models.

    Args:
        specs: the models, in order: the first that serves a pair is its default.

    Raises:
        MtkitError: two models serve one pair and one of them has no name of its own.
    """

    def __init__(self, specs: Sequence[ModelSpec]):
        self.specs = {spec.name: spec for spec in specs}
        self.direct: dict[Pair, list[str]] = {}
        for spec in specs:
            for pair in spec.directions:
                self.direct.setdefault(pair, []).append(spec.name)
        for (source, target), names in self.direct.items():
            if len(names) > 1 and not all(self.specs[n].named for n in names):
                first, second = (self.specs[n] for n in names[:2])
                raise MtkitError(
                    f"{first.path} and {second.path} both translate {source}-{target}; to serve both, name each "
                    "in a models file (--models): the first listed is the default, a request may pick the other"
                )
        pairs = list(self.direct)
        self.sources = tuple(dict.fromkeys(s for s, _ in pairs))
        self.languages = tuple(dict.fromkeys([*self.sources, *(t for _, t in pairs)]))
        self.routes: dict[Pair, Route] = {pair: (Leg(names[0], *pair),) for pair, names in self.direct.items()}
        for source in self.sources:
            for target in self.languages:
                if target != source and (source, target) not in self.routes:
                    via = self._pivot(source, target)
                    if via is not None:
                        self.routes[(source, target)] = (
                            Leg(self.direct[(source, via)][0], source, via),
                            Leg(self.direct[(via, target)][0], via, target),
                        )

    def _pivot(self, source: str, target: str) -> Optional[str]:
        for via in dict.fromkeys([PIVOT_FIRST, *self.languages]):
            if via not in (source, target) and (source, via) in self.direct and (via, target) in self.direct:
                return via
        return None

    @property
    def targets(self) -> tuple[str, ...]:
        """Every language the server translates into, directly or through a pivot."""
        return tuple(dict.fromkeys(t for _, t in self.routes))

    def targets_of(self, source: str) -> list[str]:
        """The languages ``source`` translates into: directly first, then through a pivot."""
        return [t for s, t in self.routes if s == source]

    def summary(self) -> str:
        """What the server translates, as error messages tell it: ``en to de, fr (via de); de to en``."""
        if len(self.routes) == 1:
            ((source, target),) = self.routes
            return f"{source} to {target} only"
        parts = []
        for source in self.sources:
            targets = [
                t + (f" (via {self.routes[(source, t)][0].target})" if len(self.routes[(source, t)]) > 1 else "")
                for t in self.targets_of(source)
            ]
            parts.append(f"{source} to {', '.join(targets)}")
        return "; ".join(parts)

    def check_language(self, code: str) -> None:
        """Accept a code the server reads or writes.

        Raises:
            ApiError: 400 for any other, naming what the server translates.
        """
        if code not in self.languages:
            raise ApiError(400, f"unknown language {code!r}; this server translates {self.summary()}")

    def check_model(self, model: Optional[str]) -> None:
        """Accept None or the name of one of the server's models.

        Raises:
            ApiError: 400 for another name, naming the models.
        """
        if model is not None and model not in self.specs:
            raise ApiError(400, f"unknown model {model!r}; this server has {', '.join(self.specs)}")

    def default_target(self, source: str, model: Optional[str] = None) -> str:
        """The target of a request that names none: the one language ``source`` translates into (with ``model``:
        the one that model translates it into).

        Raises:
            ApiError: 400 where it translates into several (or none), naming them.
        """
        if model is None:
            targets = self.targets_of(source)
        else:
            targets = [t for s, t in self.specs[model].directions if s == source]
        if len(targets) != 1:
            raise ApiError(400, f"no target given; {source} translates into {', '.join(targets)}: choose one")
        return targets[0]

    def route(self, source: str, target: str, model: Optional[str] = None) -> Route:
        """The legs that translate ``source`` into ``target``.

        Args:
            source: the source language.
            target: the target language.
            model: the model that must translate it (one that serves the pair), or None for the pair's default.

        Returns:
            One leg, or two through a pivot; none where ``source`` is ``target`` (the text stays as it is, as
            Argos Translate and LibreTranslate answer).

        Raises:
            ApiError: 400 for an unknown language or model, a pair no route reaches, or a model that does not serve
                the pair; each names what the server (or the model) translates.
        """
        self.check_language(source)
        self.check_language(target)
        self.check_model(model)
        if source == target:
            return ()
        if model is not None:
            if (source, target) not in self.specs[model].directions:
                served = ", ".join("-".join(d) for d in self.specs[model].directions)
                raise ApiError(400, f"model {model} translates {served}, not {source} to {target}")
            return (Leg(model, source, target),)
        found = self.routes.get((source, target))
        if found is None:
            raise ApiError(400, f"this server translates {self.summary()}, not {source} to {target}")
        return found
