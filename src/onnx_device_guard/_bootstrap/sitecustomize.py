"""Run at start-up by `onnx-device-guard run`: watch every onnxruntime session of this program.

`run` puts this folder first on PYTHONPATH, so Python imports this module at
start-up, in the program and in every Python process it starts (Ray's and
Dask's workers too). It imports nothing heavy: the watch starts once the
program imports onnxruntime, with the options `run` passed through the
`ONNX_DEVICE_GUARD_*` variables. Then the program's own `sitecustomize`, if
it has one, runs as it would have.
"""

import _thread
import os
import sys
from typing import Any


def _watch() -> None:
    """Start the watch; a Python without the package says so (and `--strict` refuses)."""
    try:
        from onnx_device_guard._births import watch_sessions
    except ImportError as error:
        text = (
            f"onnx-device-guard run: {sys.executable} cannot import onnx_device_guard ({error}), "
            "so this program's onnxruntime sessions are not watched. Install onnx-device-guard "
            "in the environment of this Python."
        )
        if os.environ.get("ONNX_DEVICE_GUARD_RESOLUTION_MODE", "").strip() == "fail":
            raise ImportError(text) from error  # --strict: no onnxruntime goes unwatched
        sys.stderr.write(text + "\n")
        return
    watch_sessions()


class _WatchOnImport:
    """A finder that answers for onnxruntime until it is imported, so the watch starts after.

    Every spec it gives has its loader patched, as a probe (`importlib.util.find_spec`)
    throws its spec away; it leaves `sys.meta_path` once onnxruntime has run.
    """

    def __init__(self) -> None:
        self.asking: set[int] = set()  # the threads looking it up through the other finders

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "onnxruntime" or _thread.get_ident() in self.asking:
            return None
        import importlib.util

        self.asking.add(_thread.get_ident())
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.asking.discard(_thread.get_ident())
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_watch(module: object) -> None:
            exec_module(module)
            _watch()  # raising for `--strict`, it stays for the next try
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        loader.exec_module = exec_then_watch
        return spec


def _start() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    if "onnxruntime" in sys.modules:  # imported by a .pth file already
        _watch()
    else:
        sys.meta_path.insert(0, _WatchOnImport())
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec(__name__, sys.path)  # the program's own
    if spec is not None and spec.loader is not None:
        sys.modules[__name__] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_start()
