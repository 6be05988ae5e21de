"""A stand-in package that worker setup hooks and plugins patch (loader asks cuda, runs CPU)."""

from __future__ import annotations

from dataclasses import dataclass

from .dist_factories import FakeSession, session_for


@dataclass
class Detector:
    session: FakeSession
    device: str


def load_detector(device: str = "cuda") -> Detector:
    return Detector(session_for("cpu"), device)
