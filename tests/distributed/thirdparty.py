"""A stand-in third-party package: a loader whose session runs on CPU although it asks for cuda."""

from __future__ import annotations

from dataclasses import dataclass

from .dist_factories import FakeSession, session_for


@dataclass
class Detector:
    session: FakeSession
    device: str


def load_detector(device: str = "cuda") -> Detector:
    return Detector(session_for("cpu"), device)
