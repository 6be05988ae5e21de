"""`python -m onnx_device_guard doctor`: the same command line as `onnx-device-guard`."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
