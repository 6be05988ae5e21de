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


class DetectorLoader:
    """The same loader as methods: bound to an instance, static, and of the class."""

    def load(self, device: str = "cuda") -> Detector:
        return Detector(session_for("cpu"), device)

    @staticmethod
    def build(device: str = "cuda") -> Detector:
        return Detector(session_for("cpu"), device)

    @classmethod
    def from_pretrained(cls, device: str = "cuda") -> Detector:
        return Detector(session_for("cpu"), device)
