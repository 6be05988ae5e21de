"""`--help` and `--version` answer without importing torch or onnxruntime."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import onnx_device_guard._cli

HEAVY = ("torch", "onnxruntime", "numpy")

# Answers --help, --version and doctor --help, then prints which heavy modules were imported.
PROBE = """\
import sys
from onnx_device_guard._cli import main
for argv in (["--help"], ["--version"], ["doctor", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
print(sorted(name for name in {heavy!r} if name in sys.modules), file=sys.stderr)
"""


# The same with a bare parent package, as a lazy `onnx_device_guard/__init__.py` gives:
# what _cli and the doctor's light modules import themselves.
BARE_PARENT = """\
import sys, types
package = types.ModuleType("onnx_device_guard")
package.__path__ = [{folder!r}]
sys.modules["onnx_device_guard"] = package
"""


def imported_by_help_and_version(prelude: str = "") -> list[str]:
    """The heavy modules a fresh Python has imported after answering --help and --version."""
    done = subprocess.run(
        [sys.executable, "-c", prelude + PROBE.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    last: list[str] = ast.literal_eval(done.stderr.strip().splitlines()[-1])
    return last


class TestStartup:
    def test_the_command_line_module_imports_nothing_heavy(self) -> None:
        """_cli.py imports no torch, onnxruntime or heavy doctor module at its top level."""
        source = Path(onnx_device_guard._cli.__file__).read_text()
        imported: set[str] = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add("." * node.level + (node.module or ""))

        assert not {name.split(".")[0] for name in imported} & set(HEAVY)
        assert imported & {".", ".._devices", "._devices", "._doctor.command"} == set()
        assert imported <= {
            "__future__",
            "argparse",
            "difflib",
            "errno",
            "math",
            "os",
            "re",
            "collections.abc",
            "importlib",
            "pathlib",
            "typing",
            "._doctor.terminal",
        }

    def test_with_a_bare_parent_package_nothing_heavy_is_imported(self) -> None:
        """Below the package's __init__, --help and --version load neither torch nor onnxruntime."""
        folder = str(Path(onnx_device_guard._cli.__file__).parent)

        assert imported_by_help_and_version(BARE_PARENT.format(folder=folder)) == []

    def test_help_and_version_import_neither_torch_nor_onnxruntime(self) -> None:
        """A fresh process answers --help and --version with torch and onnxruntime unloaded."""
        assert imported_by_help_and_version() == []
