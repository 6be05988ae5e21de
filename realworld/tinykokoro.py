"""A tiny model with Kokoro's inputs, and a voices file, built on the spot: nothing is downloaded.

`tiny_kokoro_files(root)` writes `root/tiny.onnx`, a one-node graph whose
audio is its style input (so every sample is the voice's 0.5), and
`root/voices.npz` with one voice, `af_test`, and returns both paths. Used by
the kokoro-onnx tests and the realworld bench.
"""

from __future__ import annotations

from pathlib import Path


def tiny_kokoro_files(root: Path) -> tuple[str, str]:
    """Write the model and the voices into `root`; return their paths."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "n"]),
        helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, 256]),
        helper.make_tensor_value_info("speed", TensorProto.FLOAT, [1]),
    ]
    outputs = [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 256])]
    node = helper.make_node("Identity", ["style"], ["audio"])
    graph = helper.make_graph([node], "tiny", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(root / "tiny.onnx"))
    np.savez(root / "voices.npz", af_test=np.full((510, 1, 256), 0.5, np.float32))
    return str(root / "tiny.onnx"), str(root / "voices.npz")
