"""Test inputs for a model the doctor knows nothing about: shapes, values and limits."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._errors import ModelInputError

SIZES = (1, 32, 224, 512)
"""The sizes tried in turn for every dynamic dimension (a reflect `Pad` needs more than 1)."""

DEFAULT_MAX_INPUT_MIB = 256
"""The default cap on the total size of one attempt's inputs, in MiB."""

_TORCH_DTYPES: Mapping[str, torch.dtype] = {
    f"tensor({name})": getattr(torch, name)
    for name in ["float", "double", "float16", "bool"]
    + [f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)]
}
"""onnxruntime's input types the doctor can build and hand over, named as torch names them.

Not bfloat16 nor float8: NumPy, through which `InferenceSession.run` takes its inputs, lacks them.
"""

Number = int | float | bool

BATCH = re.compile(r"n|b|bs|.*batch.*", re.IGNORECASE)
"""The names of a batch dimension, held at 1 while the others grow (as is the first of
three or more dimensions, whatever its name)."""

DEFAULT_VALUES: tuple[tuple[str, str, Number], ...] = (
    ("bool", r".*", False),
    ("integer scalar", r"sr|fs|rate|.*sampl\w*_?rate.*", 16000),
    ("integer scalar", r".*", 1),
    ("any", r".*mask.*", 1),
    ("any", r".*", 0),
)
"""The value an input is filled with: the first row whose kind and name (any case) match.

Speech models take a sample rate of 16000; a count or a length rejects 0.
"""


class UnbuildableInputError(Exception):
    """The model has an input the doctor cannot make from torch (a string, a sequence...)."""


@dataclass(frozen=True)
class ModelInput:
    """One input as the session declares it; a dimension is a number, a name or `None`."""

    name: str
    dims: tuple[int | str | None, ...]
    dtype: torch.dtype

    @property
    def dynamic(self) -> bool:
        """Whether any dimension is not a fixed number."""
        return any(not isinstance(dim, int) for dim in self.dims)

    @property
    def one_integer(self) -> bool:
        """Whether the input holds one integer (a count, a rate), whose value may matter."""
        return not self.dtype.is_floating_point and all(dim == 1 for dim in self.dims)


@dataclass(frozen=True)
class InputOverride:
    """`--input NAME=SHAPE[:VALUE]`: a shape (or `None`: the model's) and a fill value."""

    name: str
    shape: tuple[int, ...] | None
    value: Number | None
    text: str = field(compare=False)


@dataclass(frozen=True)
class InputSpec:
    """One input as one attempt builds it: a concrete shape, element type and fill value."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    value: Number = 0

    @property
    def nbytes(self) -> int:
        """How many bytes the tensor takes."""
        return math.prod(self.shape) * torch.empty(0, dtype=self.dtype).element_size()

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        text = f"{self.name} {str(self.dtype).removeprefix('torch.')}[{dims}]"
        return text if self.value in (0, False) else f"{text}={self.value}"


def declared_inputs(session: Any) -> tuple[ModelInput, ...]:
    """Return the session's inputs; raise `UnbuildableInputError` for a type torch lacks."""
    found = []
    for argument in session.get_inputs():
        dtype = _TORCH_DTYPES.get(argument.type)
        if dtype is None:
            element = str(argument.type).removeprefix("tensor(").removesuffix(")")
            lacks = element.isalnum() and element not in ("string", "complex64", "complex128")
            why = "NumPy has no such type" if lacks else "it makes only real numbers and booleans"
            raise UnbuildableInputError(
                f"input {argument.name!r} has type {argument.type}, which the doctor cannot "
                f"hand to onnxruntime ({why}); the device answer stands"
            )
        dims = tuple(
            dim if (isinstance(dim, int) and dim >= 0) or (isinstance(dim, str) and dim) else None
            for dim in (argument.shape or ())
        )
        found.append(ModelInput(str(argument.name), dims, dtype))
    return tuple(found)


def parse_input_option(text: str) -> InputOverride:
    """Return `--input`'s `NAME=SHAPE[:VALUE]`, or raise `ModelInputError`."""
    name, equals, rest = text.partition("=")
    usage = "use NAME=SHAPE[:VALUE], as in x=1x3x224x224 or sr=:16000"
    if not equals or not name.strip():
        raise ModelInputError(f"--input {text!r}: {usage}")
    shape_text, colon, value_text = (part.strip() for part in rest.partition(":"))
    shape: tuple[int, ...] | None = None if shape_text == "" else ()
    if shape_text not in ("", "[]"):
        sizes = [_size(part) for part in re.split(r"[x,]", shape_text)]
        if None in sizes:
            raise ModelInputError(
                f"--input {text!r}: the shape must be whole numbers from 0 to {MAX_SIZE} joined "
                f"by 'x' (or [] for a scalar); {usage}"
            )
        shape = tuple(size for size in sizes if size is not None)
    value = _parse_value(value_text, text) if colon else None
    if shape is None and value is None:
        raise ModelInputError(f"--input {text!r} gives neither a shape nor a value; {usage}")
    return InputOverride(name.strip(), shape, value, text)


def _parse_value(text: str, option: str) -> Number:
    """A number, `true` or `false`; raise `ModelInputError` for anything else."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    with contextlib.suppress(ValueError):
        return int(text)
    with contextlib.suppress(ValueError):
        if math.isfinite(value := float(text)):
            return value
    raise ModelInputError(
        f"--input {option!r}: the value {text!r} is not a finite number, true or false"
    )


MAX_SIZE = 2**31 - 1
"""The largest size `--dim` and `--input` take for one dimension."""


def _size(text: str) -> int | None:
    """A dimension's size from 0 to `MAX_SIZE`, or `None` for anything else."""
    text = text.strip()
    if not text.isdigit() or len(text) > len(str(MAX_SIZE)) or int(text) > MAX_SIZE:
        return None
    return int(text)


def parse_dim_option(text: str) -> tuple[str, int]:
    """Return `--dim`'s `NAME=N`, or raise `ModelInputError`."""
    name, equals, size = text.partition("=")
    number = _size(size)
    if not equals or not name.strip() or number is None:
        raise ModelInputError(
            f"--dim {text!r}: use NAME=N with a named dynamic dimension of the model and a "
            f"size from 0 to {MAX_SIZE}, as in --dim height=64"
        )
    return name.strip(), number


def default_value(model_input: ModelInput) -> Number:
    """The value the doctor fills an input with when the user gives none."""
    kind = "integer scalar" if model_input.one_integer else "tensor"
    kind = "bool" if model_input.dtype == torch.bool else kind
    for row_kind, pattern, value in DEFAULT_VALUES:
        if row_kind in (kind, "any") and re.fullmatch(pattern, model_input.name, re.IGNORECASE):
            return value
    return 0


def check_overrides(
    inputs: Sequence[ModelInput], overrides: Mapping[str, InputOverride], label: str
) -> None:
    """Raise `ModelInputError` if an `--input` does not fit the model input it names."""
    by_name = {model_input.name: model_input for model_input in inputs}
    for name, override in overrides.items():
        if name not in by_name:
            continue  # another model's input; the CLI reports names no model has
        dtype, value = by_name[name].dtype, override.value
        declared = [dim if isinstance(dim, int) else None for dim in by_name[name].dims]
        if override.shape is not None and (
            len(override.shape) != len(declared)
            or any(
                dim not in (None, size) for size, dim in zip(override.shape, declared, strict=True)
            )
        ):
            shown = "x".join("?" if dim is None else str(dim) for dim in declared) or "[]"
            raise ModelInputError(
                f"--input {override.text!r} does not fit '{label}': its input {name!r} has "
                f"shape {shown} ({'? is dynamic' if '?' in shown else 'fixed'})"
            )
        if value is not None and not _fits(value, dtype):
            raise ModelInputError(
                f"--input {override.text!r}: input {name!r} of '{label}' holds "
                f"{str(dtype).removeprefix('torch.')}, which cannot hold {value}"
            )


def _fits(value: Number, dtype: torch.dtype) -> bool:
    """Whether `value` is one `dtype` holds: finite, and as it is for integers and bools."""
    try:  # torch keeps -1 in a uint8 as 255, 2.5 in an int64 as 2 and 2 in a bool as True
        held = torch.full((), value, dtype=dtype)
    except (RuntimeError, OverflowError):
        return False
    return bool(held.isfinite()) and (dtype.is_floating_point or held.item() == value)


def attempts(
    inputs: Sequence[ModelInput], overrides: Mapping[str, InputOverride], dims: Mapping[str, int]
) -> Iterator[tuple[InputSpec, ...]]:
    """Yield the input sets to try, in order, each different from the ones before.

    Every dynamic dimension takes each of `SIZES` in turn, but a batch stays
    at 1; `overrides` and `dims` win over both.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor.inputs import ModelInput, attempts
        >>> image = ModelInput("x", (None, 3, "h", "w"), torch.float32)
        >>> [specs[0].shape for specs in attempts([image], {}, {"h": 8})][:2]
        [(1, 3, 8, 1), (1, 3, 8, 32)]
    """
    seen: set[tuple[InputSpec, ...]] = set()
    for size in SIZES:
        specs = tuple(
            _spec(model_input, overrides.get(model_input.name), dims, size)
            for model_input in inputs
        )
        if specs not in seen:
            seen.add(specs)
            yield specs


def _spec(
    model_input: ModelInput, override: InputOverride | None, dims: Mapping[str, int], size: int
) -> InputSpec:
    """One input of one attempt: the override's shape and value, else the search's."""
    value = default_value(model_input)
    if override is not None and override.value is not None:
        value = override.value
    if override is not None and override.shape is not None:
        return InputSpec(model_input.name, override.shape, model_input.dtype, value)
    rank, shape = len(model_input.dims), []
    for axis, dim in enumerate(model_input.dims):
        batch = (axis == 0 and rank >= 3) or (isinstance(dim, str) and BATCH.fullmatch(dim))
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(dims[dim])
        else:
            shape.append(1 if batch else size)
    return InputSpec(model_input.name, tuple(shape), model_input.dtype, value)


def make_tensors(specs: Sequence[InputSpec], device: torch.device) -> list[torch.Tensor]:
    """A tensor for each of `specs`, made on the CPU (or `UnbuildableInputError`), then moved."""
    try:
        made = [torch.full(spec.shape, spec.value, dtype=spec.dtype) for spec in specs]
    except (RuntimeError, ValueError, OverflowError) as error:
        raise UnbuildableInputError(f"the doctor cannot make its test inputs: {error}") from None
    return [tensor.to(device) for tensor in made]


def mentioned_inputs(message: str, inputs: Sequence[ModelInput]) -> tuple[str, ...]:
    """The inputs an onnxruntime error names (`input: x`, `'x'`), in declaration order."""
    found = []
    for model_input in inputs:
        name = re.escape(model_input.name)
        if re.search(rf"input:?\s*'?{name}'?(?![\w.])|'{name}'|\"{name}\"", message, re.I):
            found.append(model_input.name)
    return tuple(found)
