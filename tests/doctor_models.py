"""Small ONNX models, built with ``onnx.helper``, that refuse the doctor's first inputs.

Each function writes one model to a folder and returns its path. They stand in
for real models whose operators need more than one pixel or sample, or a
scalar of the right value.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what onnxruntime 1.17, the oldest supported, reads


def _save(graph: object, path: Path) -> Path:
    model = helper.make_model(
        graph,  # type: ignore[arg-type]
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )
    path.write_bytes(model.SerializeToString())
    return path


def _const(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def reflect_pad(path: Path) -> Path:
    """x float[1, 1, h, w] padded by one in reflect mode: needs h and w of at least 2."""
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
        "reflect_pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("pads", [0, 0, 1, 1, 0, 0, 1, 1])],
    )
    return _save(graph, path)


def two_pixel_concat(path: Path) -> Path:
    """Concatenates columns 0:2 of x float[1, 3, 1, w] with a constant two columns wide.

    The widths agree, as Concat needs, only from two pixels on.
    """
    graph = helper.make_graph(
        [
            helper.make_node("Slice", ["x", "start", "end", "axis"], ["left"]),
            helper.make_node("Concat", ["left", "pair"], ["y"], axis=1),
        ],
        "two_pixel_concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            _const("start", [0]),
            _const("end", [2]),
            _const("axis", [3]),
            numpy_helper.from_array(np.zeros((1, 1, 1, 2), dtype=np.float32), "pair"),
        ],
    )
    return _save(graph, path)


def positive_scalar(path: Path, name: str = "n") -> Path:
    """Reshapes x float[4] to [n, -1] with allowzero: n = 0 fails, n = 1 works."""
    graph = helper.make_graph(
        [
            helper.make_node("Unsqueeze", [name, "zero"], ["rows"]),
            helper.make_node("Concat", ["rows", "minus_one"], ["shape"], axis=0),
            helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1),
        ],
        "positive_scalar",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info(name, TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("zero", [0]), _const("minus_one", [-1])],
    )
    return _save(graph, path)


def sample_rate(path: Path, name: str = "sr") -> Path:
    """Reshapes x float[4] to [4 * (sr - 15999)]: only a sample rate of 16000 runs."""
    graph = helper.make_graph(
        [
            helper.make_node("Sub", [name, "base"], ["step"]),
            helper.make_node("Mul", ["step", "four"], ["length"]),
            helper.make_node("Unsqueeze", ["length", "zero"], ["shape"]),
            helper.make_node("Reshape", ["x", "shape"], ["y"]),
        ],
        "sample_rate",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info(name, TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(15999, dtype=np.int64), "base"),
            numpy_helper.from_array(np.array(4, dtype=np.int64), "four"),
            _const("zero", [0]),
        ],
    )
    return _save(graph, path)


def seven_samples(path: Path, length: int | str = "length") -> Path:
    """Reshapes x float[length] to [7]: no size the doctor tries fits, --dim length=7 does
    (a fixed `length` other than 7: nothing fits)."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "seven"], ["y"])],
        "seven_samples",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("seven", [7])],
    )
    return _save(graph, path)


def static_input(path: Path, shape: list[int | str], element: int = TensorProto.FLOAT) -> Path:
    """An identity on an input of a fixed `shape` and type (a few dozen bytes for any shape)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "static_input",
        [helper.make_tensor_value_info("x", element, shape)],
        [helper.make_tensor_value_info("y", element, shape)],
    )
    return _save(graph, path)


def future_opset(path: Path) -> Path:
    """An identity stamped with opset 999, which onnxruntime refuses with a long message."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "future_opset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 999)], ir_version=IR_VERSION
    )
    path.write_bytes(model.SerializeToString())
    return path


def endless_loop(path: Path, steps: int = 10**12) -> Path:
    """y = x + `steps` for x float[1], by a Loop that adds one `steps` times (hours of work)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1]),
        ],
        [numpy_helper.from_array(np.ones(1, dtype=np.float32), "one")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["steps", "keep_going", "x"], ["y"], body=body)],
        "endless_loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [
            numpy_helper.from_array(np.array(steps, dtype=np.int64), "steps"),
            numpy_helper.from_array(np.array(True), "keep_going"),
        ],
    )
    return _save(graph, path)


def with_external_data(path: Path) -> Path:
    """y = x + w with w float[256] kept in `weights.bin` beside the model file."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "with_external_data",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
        [numpy_helper.from_array(np.ones(256, dtype=np.float32), "w")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    onnx.save_model(
        model,
        os.fsdecode(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


def named_input(path: Path, name: bytes) -> Path:
    """An identity on a float[1] input named by the raw bytes `name` (UTF-8 or not)."""
    stand_in = "q" * len(name)
    graph = helper.make_graph(
        [helper.make_node("Identity", [stand_in], ["y"])],
        "named_input",
        [helper.make_tensor_value_info(stand_in, TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    # Protocol buffers store strings as length and bytes: same length, any bytes.
    path.write_bytes(model.SerializeToString().replace(stand_in.encode(), name))
    return path


def many_inputs(path: Path, count: int) -> Path:
    """The sum of `count` float[1] inputs x0, x1, ... (a Sum node takes any number)."""
    names = [f"x{number}" for number in range(count)]
    graph = helper.make_graph(
        [helper.make_node("Sum", names, ["y"])],
        "many_inputs",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1]) for name in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return _save(graph, path)


def gpu_only_operator(path: Path) -> Path:
    """com.microsoft's GroupNorm on x float[1, 4, 4, 4]: onnxruntime has a CUDA kernel for
    it and no CPU one, so no session can be created without the CUDA provider."""
    graph = helper.make_graph(
        [
            helper.make_node(
                "GroupNorm",
                ["x", "gamma", "beta"],
                ["y"],
                domain="com.microsoft",
                epsilon=1e-5,
                groups=1,
                activation=0,
            )
        ],
        "gpu_only_operator",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [
            numpy_helper.from_array(np.ones(4, dtype=np.float32), "gamma"),
            numpy_helper.from_array(np.zeros(4, dtype=np.float32), "beta"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        ir_version=IR_VERSION,
    )
    path.write_bytes(model.SerializeToString())
    return path
