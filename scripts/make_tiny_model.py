"""Write the tiny ONNX model that ships in the package (``data/tiny.onnx``).

The model computes ``y = x + 1`` for a float32 input ``x`` of shape
``[batch, 4]``, where ``batch`` is dynamic. It is small enough to ship (a few
hundred bytes), old enough in IR version and opset for any onnxruntime this
library supports, and real enough for onnxruntime to create a session and run
an inference on it. Run ``python scripts/make_tiny_model.py`` (needs the
``onnx`` package) to regenerate it; the output is deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 7  # the IR version that goes with opset 13; onnxruntime >= 1.8 reads it
DEFAULT_OUTPUT = (
    Path(__file__).resolve().parents[1] / "src" / "onnx_device_guard" / "data" / "tiny.onnx"
)


def build_tiny_model() -> onnx.ModelProto:
    """Return the ``y = x + 1`` model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    one = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), name="one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "tiny", [x], [y], initializer=[one]
    )
    model = helper.make_model(
        graph,
        producer_name="onnx-device-guard",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(build_tiny_model().SerializeToString())
    print(f"wrote {output} ({output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
