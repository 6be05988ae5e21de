"""Test inputs for a model the doctor knows nothing about: shapes, values and limits.

A model declares its inputs with a type and a shape whose dimensions are
numbers, names (`batch`, `height`) or unknown. The doctor fills the dynamic
dimensions with a few sizes in turn (1 first, then larger ones, since a
reflect `Pad` or a pooling layer needs more than one pixel), keeps
batch-like dimensions at 1 where it can, and gives each input a value real
models accept: zeros, ones for masks, 16000 for a sample rate, 1 for other
integer scalars. The user can pin any of this with `--input` and `--dim`.

Nothing here runs a model; `probe` does, attempt by attempt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._errors import ModelInputError

SIZES = (1, 32, 224, 512, 1024)
"""The sizes tried in turn for every dynamic dimension."""

DEFAULT_MAX_INPUT_MIB = 256
"""The default cap on the total size of one attempt's inputs, in MiB."""

SEARCH_SECONDS = 20.0
"""No larger attempt starts once the search has run this long."""

SAMPLE_RATE = 16000
"""The value given to an integer scalar named like a sample rate; speech models accept it."""

_TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "tensor(float)": torch.float32,
    "tensor(double)": torch.float64,
    "tensor(float16)": torch.float16,
    "tensor(bfloat16)": torch.bfloat16,
    "tensor(int8)": torch.int8,
    "tensor(int16)": torch.int16,
    "tensor(int32)": torch.int32,
    "tensor(int64)": torch.int64,
    "tensor(uint8)": torch.uint8,
    "tensor(bool)": torch.bool,
}

Number = int | float | bool

DIMENSION_ROLES: Mapping[str, str] = {
    "batch": r"n|b|bs|batch.*|.*_batch|num_batch.*|.*batch_size",
    "generated": r"\?|unk__\d+|.*dynamicdimension.*|dim_?\d+|[a-z_]*\d+",
}
"""What a dimension's name says about it: a role, and the names (any case) that have it.

`batch`: held at 1 while the other dynamic dimensions grow. `generated`: a
name an exporter made up (`unk__214`, `p2o.DynamicDimension.0`), which means
no more than an unnamed dimension.
"""

DEFAULT_VALUES: tuple[tuple[str, str, Number], ...] = (
    ("bool", r".*", False),
    ("integer scalar", r"sr|fs|rate|.*sampl\w*_?rate.*", SAMPLE_RATE),
    ("integer scalar", r".*", 1),
    ("any", r".*mask.*", 1),
    ("any", r".*", 0),
)
"""The value an input is filled with: the first row whose kind and name (any case) match.

Speech models take a sample rate of 16000; a count or a length rejects 0;
attention masks are ones; everything else is zeros.
"""


def has_role(dim: str, role: str) -> bool:
    """Whether the dimension named `dim` has `role` in `DIMENSION_ROLES`.

    Examples:
        >>> from onnx_device_guard._doctor.inputs import has_role
        >>> has_role("batch_size", "batch"), has_role("unk__214", "generated")
        (True, True)
    """
    return re.fullmatch(DIMENSION_ROLES[role], dim, re.IGNORECASE) is not None


class UnbuildableInputError(Exception):
    """The model has an input the doctor cannot make from torch (a string, a sequence...)."""


@dataclass(frozen=True)
class ModelInput:
    """One input as the session declares it: name, element type and dimensions.

    A dimension is a number (static), a name (a named dynamic dimension), or
    `None` (dynamic and unnamed).
    """

    name: str
    dims: tuple[int | str | None, ...]
    dtype: torch.dtype

    @property
    def dynamic(self) -> bool:
        """Whether any dimension is not a fixed number."""
        return any(not isinstance(dim, int) for dim in self.dims)

    @property
    def one_integer(self) -> bool:
        """Whether the input holds one integer (rank 0, or every dimension fixed at 1).

        Such an input (a count, a length, a rate) may decide by its value, not
        only its shape, whether the model runs.
        """
        return not self.dtype.is_floating_point and all(dim == 1 for dim in self.dims)

    def takes(self, shape: tuple[int, ...]) -> bool:
        """Whether `shape` has the input's rank and its fixed dimensions."""
        pairs = zip(shape, self.dims, strict=False)
        return len(shape) == len(self.dims) and all(
            not isinstance(dim, int) or dim == size for size, dim in pairs
        )

    def shape_text(self) -> str:
        """The declared shape as `1x3x?x?` (`[]` for a scalar)."""
        if not self.dims:
            return "[]"
        return "x".join(str(dim) if isinstance(dim, int) else "?" for dim in self.dims)


@dataclass(frozen=True)
class InputOverride:
    """`--input NAME=SHAPE[:VALUE]`: a shape (or `None`: the model's) and a fill value."""

    name: str
    shape: tuple[int, ...] | None
    value: Number | None
    text: str


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
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        return math.prod(self.shape) * itemsize

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
            raise UnbuildableInputError(
                f"input {argument.name!r} has type {argument.type}, which the doctor cannot "
                "build as a torch tensor"
            )
        dims = tuple(
            dim if (isinstance(dim, int) and dim >= 0) or (isinstance(dim, str) and dim) else None
            for dim in (argument.shape or ())
        )
        found.append(ModelInput(str(argument.name), dims, dtype))
    return tuple(found)


def parse_input_option(text: str) -> InputOverride:
    """Return `--input`'s `NAME=SHAPE[:VALUE]`, or raise `ModelInputError`.

    SHAPE is dimensions joined by `x` (`1x3x224x224`), `[]` for a scalar, or
    empty for the model's own shape; VALUE fills the tensor (a number, `true`
    or `false`).

    Examples:
        >>> from onnx_device_guard._doctor.inputs import parse_input_option
        >>> parse_input_option("x=1x3x224x224")
        InputOverride(name='x', shape=(1, 3, 224, 224), value=None, text='x=1x3x224x224')
        >>> parse_input_option("sr=:16000").value
        16000
        >>> parse_input_option("x=1x-3")
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: --input 'x=1x-3': ...
    """
    name, equals, rest = text.partition("=")
    name = name.strip()
    usage = "use NAME=SHAPE[:VALUE], as in x=1x3x224x224 or sr=:16000"
    if not equals or not name:
        raise ModelInputError(f"--input {text!r}: {usage}")
    shape_text, colon, value_text = rest.partition(":")
    shape_text = shape_text.strip()
    shape: tuple[int, ...] | None
    if shape_text == "":
        shape = None
    elif shape_text == "[]":
        shape = ()
    else:
        try:
            shape = tuple(int(part) for part in re.split(r"[x,]", shape_text))
        except ValueError:
            shape = (-1,)
        if any(dim < 0 for dim in shape):
            raise ModelInputError(
                f"--input {text!r}: the shape must be whole numbers of 0 or more joined by "
                f"'x' (or [] for a scalar); {usage}"
            )
    value = _parse_value(value_text.strip(), text) if colon else None
    if shape is None and value is None:
        raise ModelInputError(f"--input {text!r} gives neither a shape nor a value; {usage}")
    return InputOverride(name, shape, value, text)


def _parse_value(text: str, option: str) -> Number:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ModelInputError(
            f"--input {option!r}: the value {text!r} is not a finite number, true or false"
        )
    return value


def parse_dim_option(text: str) -> tuple[str, int]:
    """Return `--dim`'s `NAME=N`, or raise `ModelInputError`.

    Examples:
        >>> from onnx_device_guard._doctor.inputs import parse_dim_option
        >>> parse_dim_option("height=64")
        ('height', 64)
    """
    name, equals, size = text.partition("=")
    try:
        number = int(size)
    except ValueError:
        number = -1
    if not equals or not name.strip() or number < 0:
        raise ModelInputError(
            f"--dim {text!r}: use NAME=N with a named dynamic dimension of the model and a "
            "size of 0 or more, as in --dim height=64"
        )
    return name.strip(), number


def default_value(model_input: ModelInput) -> Number:
    """The value the doctor fills an input with when the user gives none.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor.inputs import ModelInput, default_value
        >>> default_value(ModelInput("sr", (), torch.int64))
        16000
        >>> default_value(ModelInput("attention_mask", (None, None), torch.int64))
        1
        >>> default_value(ModelInput("x", (1, None), torch.float32))
        0
    """
    kind = "integer scalar" if model_input.one_integer else "tensor"
    kind = "bool" if model_input.dtype == torch.bool else kind
    for row_kind, pattern, value in DEFAULT_VALUES:
        if row_kind in (kind, "any") and re.fullmatch(pattern, model_input.name, re.IGNORECASE):
            return value
    return 0


def check_overrides(
    inputs: Sequence[ModelInput],
    overrides: Mapping[str, InputOverride],
    label: str,
) -> None:
    """Raise `ModelInputError` if an `--input` does not fit the model input it names."""
    by_name = {model_input.name: model_input for model_input in inputs}
    for name, override in overrides.items():
        model_input = by_name.get(name)
        if model_input is None:
            continue  # another model's input; the CLI reports names no model has
        if override.shape is not None and not model_input.takes(override.shape):
            raise ModelInputError(
                f"--input {override.text!r} does not fit '{label}': its input {name!r} has "
                f"shape {model_input.shape_text()} (? is dynamic)"
            )
        value = override.value
        if isinstance(value, float) and not (
            model_input.dtype.is_floating_point or value.is_integer()
        ):
            raise ModelInputError(
                f"--input {override.text!r}: input {name!r} of '{label}' holds "
                f"{str(model_input.dtype).removeprefix('torch.')}, not {value}"
            )


def attempts(
    inputs: Sequence[ModelInput],
    overrides: Mapping[str, InputOverride],
    dims: Mapping[str, int],
) -> Iterator[tuple[InputSpec, ...]]:
    """Yield the input sets to try, in order, each different from the ones before.

    Size 1 for every dynamic dimension first; then, for each larger size,
    batch-like dimensions (named like `batch`, or the first of an unnamed
    rank-3-or-more input) held at 1, then every dynamic dimension at that size.
    `overrides` and `dims` win over both.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor.inputs import ModelInput, attempts
        >>> image = ModelInput("x", (None, 3, "h", "w"), torch.float32)
        >>> [specs[0].shape for specs in attempts([image], {}, {})][:3]
        [(1, 3, 1, 1), (1, 3, 32, 32), (32, 3, 32, 32)]
        >>> [specs[0].shape for specs in attempts([image], {}, {"h": 8})][:2]
        [(1, 3, 8, 1), (1, 3, 8, 32)]
    """
    seen: set[tuple[InputSpec, ...]] = set()
    for size in SIZES:
        for keep_batch in (True, False):
            specs = tuple(
                _spec(model_input, overrides.get(model_input.name), dims, size, keep_batch)
                for model_input in inputs
            )
            if specs not in seen:
                seen.add(specs)
                yield specs


def _spec(
    model_input: ModelInput,
    override: InputOverride | None,
    dims: Mapping[str, int],
    size: int,
    keep_batch: bool,
) -> InputSpec:
    value = default_value(model_input)
    if override is not None and override.value is not None:
        value = override.value
    if override is not None and override.shape is not None:
        return InputSpec(model_input.name, override.shape, model_input.dtype, value)
    shape = []
    for axis, dim in enumerate(model_input.dims):
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(dims[dim])
        elif keep_batch and _batch_like(dim, axis, len(model_input.dims)):
            shape.append(1)
        else:
            shape.append(size)
    return InputSpec(model_input.name, tuple(shape), model_input.dtype, value)


def named_by_a_person(dim: str) -> bool:
    """Whether a dimension's name means something (`height`), not one an exporter made up.

    Examples:
        >>> from onnx_device_guard._doctor.inputs import named_by_a_person
        >>> named_by_a_person("height"), named_by_a_person("unk__214")
        (True, False)
    """
    return not has_role(dim, "generated")


def _batch_like(dim: str | None, axis: int, rank: int) -> bool:
    if isinstance(dim, str) and has_role(dim, "batch"):
        return True
    unnamed = dim is None or has_role(dim, "generated")
    return unnamed and axis == 0 and rank >= 3


def make_tensors(specs: Sequence[InputSpec], device: torch.device) -> list[torch.Tensor]:
    """Return a tensor for each of `specs` on `device`, filled with its value."""
    return [torch.full(spec.shape, spec.value, dtype=spec.dtype, device=device) for spec in specs]


def mentioned_inputs(message: str, inputs: Sequence[ModelInput]) -> tuple[str, ...]:
    """The inputs an onnxruntime error names (`input: x`, `'x'`), in declaration order.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor.inputs import ModelInput, mentioned_inputs
        >>> inputs = [ModelInput("x", (None,), torch.float32), ModelInput("sr", (), torch.int64)]
        >>> mentioned_inputs("Got invalid dimensions for input: sr for the following", inputs)
        ('sr',)
    """
    found = []
    for model_input in inputs:
        name = re.escape(model_input.name)
        pattern = rf"(?:input:?\s*'?{name}'?(?![\w.])|'{name}'|\"{name}\")"
        if re.search(pattern, message, re.IGNORECASE):
            found.append(model_input.name)
    return tuple(found)


def hint_for(model_input: ModelInput) -> str:
    """The `--input` option a user would fill in for `model_input`, with placeholders.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor.inputs import ModelInput, hint_for
        >>> hint_for(ModelInput("x", (None, 3, "h", "w"), torch.float32))
        '--input x=Nx3xHxW'
        >>> hint_for(ModelInput("sr", (), torch.int64))
        '--input sr=:VALUE'
    """
    if model_input.one_integer:
        return f"--input {model_input.name}=:VALUE"
    parts = []
    for axis, dim in enumerate(model_input.dims):
        if isinstance(dim, int):
            parts.append(str(dim))
        elif isinstance(dim, str) and named_by_a_person(dim) and re.fullmatch(r"[A-Za-z]\w*", dim):
            parts.append(dim.upper())
        else:
            parts.append("N" if axis == 0 else f"D{axis}")
    return f"--input {model_input.name}={'x'.join(parts) or '[]'}"
