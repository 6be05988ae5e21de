"""`onnx-device-guard doctor`: does a model run on the device you want, and if not, why.

One module per job: `facts` (the records), `machine` (GPU facts), `files`, `inputs`,
`capture` (what onnxruntime says), `probe` (sessions and runs), `diagnosis`, `render`,
`terminal` and `command` (options to exit status). Nothing is imported here, so that
`terminal`, which the command line imports, loads without torch.
"""
