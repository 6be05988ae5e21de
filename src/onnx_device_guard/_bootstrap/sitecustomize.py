"""Run at start-up by `onnx-device-guard run`: watch every onnxruntime session of this program.

`run` puts this folder first on PYTHONPATH, so Python imports this module at
start-up, in the program and in every Python process it starts (Ray's and
Dask's workers too). It imports nothing heavy: the watch starts once the
program imports onnxruntime, with the options `run` passed through the
`ONNX_DEVICE_GUARD_*` variables. Then the program's own `sitecustomize`, if
it has one, runs as it would have.
"""

import os
import sys
from typing import Any


class _WatchOnImport:
    """A finder that answers for onnxruntime once, so the watch starts after its import."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "onnxruntime":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_watch(module: object) -> None:
            exec_module(module)
            from onnx_device_guard._births import watch_sessions

            watch_sessions()

        loader.exec_module = exec_then_watch
        return spec


def _start() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    if "onnxruntime" in sys.modules:  # imported by a .pth file already
        from onnx_device_guard._births import watch_sessions

        watch_sessions()
    else:
        sys.meta_path.insert(0, _WatchOnImport())
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec(__name__, sys.path)  # the program's own
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_start()
