"""The README's two set-up commands: installable from a clone, and the test one is CI's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SET_UP = README[README.index("## Set up") : README.index("## Quickstart")]
COMMANDS = re.findall(r"^```console\n\$ (.*)\n```", SET_UP, re.MULTILINE)


class TestSetUp:
    def test_there_are_two_commands(self) -> None:
        """One installs from the clone and runs the doctor; one runs the tests."""
        install, tests = COMMANDS

        assert 'pip install torch==2.13.0 -e ".[cpu]"' in install
        assert install.endswith("onnx-device-guard doctor")
        assert tests.endswith("nox")

    def test_the_test_command_is_the_one_ci_runs(self) -> None:
        """.ci/run runs the README's test command, line for line."""
        ci = (ROOT / ".ci" / "run").read_text().splitlines()

        assert COMMANDS[1] in ci

    def test_no_command_needs_a_package_index_for_this_package(self) -> None:
        """The package is installed from the clone, never by its name from an index."""
        assert not [command for command in COMMANDS if "install onnx-device-guard" in command]
        assert not [command for command in COMMANDS if '"onnx-device-guard[' in command]
