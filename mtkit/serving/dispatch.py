"""A request's texts along their routes: each text's source (given, or detected per text among the server's
sources), its route (``routing.Router``), the texts grouped by route and the groups translated concurrently, a
pivot's legs one after the other; the answers come back in the request's order.

Through a pivot, the first leg translates each text alone (its instructions are in the target language), the last
leg translates the pivot text with the instructions and options of the request; the legs share the request's
timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Optional, Sequence

from mtkit.inference.results import Hypothesis, Translation
from mtkit.inference.segments import Segment
from mtkit.serving.detection import Detection
from mtkit.serving.errors import ApiError
from mtkit.serving.routing import Route, Router
from mtkit.serving.schemas import RequestOptions
from mtkit.serving.service import Disconnected, TranslationService

AUTO = ("auto", "", None)  # the source values that ask for detection


@dataclasses.dataclass
class Plan:
    """Where each text of a request goes."""

    routes: list[Route]
    detected: Optional[list[dict]] = None  # each text's {"confidence", "language"} where its source was detected


def text_of(line) -> str:
    """A line's text: a str, or a ``Segment``'s ``text``."""
    return line.text if isinstance(line, Segment) else line


class Dispatcher:
    """Translates requests with a service's models along a router's routes.

    Args:
        service: the translation service (its pool holds the router's models).
        router: the routes.
    """

    def __init__(self, service: TranslationService, router: Router):
        self.service, self.router = service, router
        self.detection = Detection(router.languages)  # /detect: among every language the server reads or writes
        self.source_detection = Detection(router.sources)
        self._model_detection: dict[tuple[str, ...], Detection] = {}  # a requested model's sources -> their detector

    def detect_sources(self, texts: Sequence[str], candidates: Optional[tuple[str, ...]] = None) -> list[dict]:
        """Each text's source language among ``candidates`` (default: the server's sources):
        ``{"confidence", "language"}``.

        Raises:
            ApiError: 400 where no detector can tell the server's sources apart (give the source instead).
        """
        detection = self.source_detection
        if candidates is not None and candidates != self.router.sources:
            detection = self._model_detection.setdefault(candidates, Detection(candidates))
        try:
            return [detection.detect(text)[0] for text in texts]
        except ApiError as err:
            raise ApiError(400, f"source auto: {err.message}; give the source language") from None

    def plan(
        self, texts: Sequence[str], source: Optional[str], targets: Sequence[Optional[str]], model: Optional[str] = None
    ) -> Plan:
        """Each text's route.

        Args:
            texts: the texts.
            source: their source language; ``auto`` (or None, "") to detect each text's where the server (or the
                requested model) reads several, the one source where it reads one.
            targets: each text's target language; None for the one its source translates into.
            model: the model that must translate them, or None for each pair's default.

        Raises:
            ApiError: 400 for an unknown language or model, or a pair no route reaches (``Router.route``).
        """
        router = self.router
        router.check_model(model)
        detected = None
        # a requested model's own sources where it reads fewer than the server
        candidates = (
            router.sources if model is None else tuple(dict.fromkeys(s for s, _ in router.specs[model].directions))
        )
        if source not in AUTO:
            sources = [source] * len(texts)
        elif len(candidates) == 1:
            sources = [candidates[0]] * len(texts)
        else:
            detected = self.detect_sources(texts, candidates)
            sources = [d["language"] for d in detected]
        routes = [router.route(s, t or router.default_target(s, model), model) for s, t in zip(sources, targets)]
        return Plan(routes, detected)

    async def run(
        self,
        lines: list,
        source: Optional[str],
        targets: Sequence[Optional[str]],
        options: Optional[RequestOptions] = None,
        disconnected: Optional[Disconnected] = None,
        *,
        model: Optional[str] = None,
        bounded: bool = True,
        glossary=None,
    ) -> tuple[list, Plan]:
        """Translate a request's lines: bounds, routes (``plan``), then ``translate``.

        Returns:
            One ``results.Translation`` per line, in order, and the plan they followed.

        Raises:
            ApiError: as ``TranslationService.check_bounds``, ``plan`` and ``translate``.
        """
        if bounded:
            self.service.check_bounds(lines)
        plan = self.plan([text_of(line) for line in lines], source, targets, model)
        return await self.translate(lines, plan.routes, options, disconnected, glossary), plan

    async def translate(
        self,
        lines: list,
        routes: Sequence[Route],
        options: Optional[RequestOptions] = None,
        disconnected: Optional[Disconnected] = None,
        glossary=None,
    ) -> list:
        """Each line's translation along its route: the lines grouped by route, the groups concurrently; a
        ``glossary`` (``text.glossary.Glossary``) holds where a model translates the line's pair itself.

        Raises:
            ApiError: the first error of any group (the other groups' sentences are then dropped); 400 for a
                glossary on a route through a pivot.
        """
        options = options or RequestOptions()
        if glossary is not None and any(len(route) > 1 for route in routes):
            raise ApiError(400, "a glossary applies where one model translates the pair, not through a pivot")
        groups: dict[Route, list[int]] = {}
        for i, route in enumerate(routes):
            groups.setdefault(route, []).append(i)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.service.limits.timeout
        if len(groups) <= 1:
            calls = [self._along(route, lines, options, disconnected, deadline, glossary=glossary) for route in groups]
            return (await calls[0])[1] if calls else []
        watch = asyncio.ensure_future(disconnected()) if disconnected else None
        shared = (lambda: asyncio.shield(watch)) if watch is not None else None  # one receive() for every group
        tasks = [
            asyncio.ensure_future(
                self._along(route, [lines[i] for i in indexes], options, shared, deadline, indexes, glossary),
            )
            for route, indexes in groups.items()
        ]
        try:
            done = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # each drops its queued sentences
            raise
        finally:
            if watch is not None:
                watch.cancel()
        out: list = [None] * len(lines)
        for indexes, results in done:
            for i, result in zip(indexes, results):
                out[i] = result
        return out

    async def _along(
        self,
        route: Route,
        lines: list,
        options: RequestOptions,
        disconnected: Optional[Disconnected],
        deadline: float,
        indexes: Optional[list[int]] = None,
        glossary=None,
    ) -> tuple[list[int], list]:
        """``lines`` through the legs of ``route``; returns (their indexes in the request, their results)."""
        indexes = list(range(len(lines))) if indexes is None else indexes
        if not route:  # the source is the target language: each text as it is
            return indexes, [_unchanged(text_of(line)) for line in lines]
        numbers = [i + 1 for i in indexes]
        loop = asyncio.get_running_loop()
        texts: Optional[list[str]] = None
        results: list = []
        for n, leg in enumerate(route):
            last = n == len(route) - 1
            if last:
                batch = [_own(line, None if texts is None else texts[i]) for i, line in enumerate(lines)]
                leg_options = options
            else:  # a pivot's first leg: the texts alone, one best translation each
                batch = [text_of(line) for line in lines]
                leg_options = RequestOptions(format=options.format, split_sentences=options.split_sentences)
            multilingual = self.router.specs[leg.model].multilingual
            results = await self.service.translate(
                batch,
                leg_options,
                disconnected,
                bounded=False,
                model=leg.model,
                target=leg.target if multilingual else None,
                source=leg.source if multilingual else None,
                timeout=None if n == 0 else max(0.0, deadline - loop.time()),
                numbers=numbers,
                glossary=glossary if last else None,
            )
            if not last:
                texts = [result.text for result in results]
        return indexes, results


def _unchanged(text: str) -> Translation:
    """A text's own "translation" into its language: itself (none for a blank text, as a model answers)."""
    return Translation(text, (), (Hypothesis(text, ()),) if text.strip() else ())


def _own(line, text: Optional[str]):
    """A line as its route's last leg reads it: its text (or the pivot's ``text``) and instructions; its target
    goes with the call."""
    if isinstance(line, Segment):
        line = dataclasses.replace(line, target=None, **({"text": text} if text is not None else {}))
        return line.text if line.plain else line
    return line if text is None else text
