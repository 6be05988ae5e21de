"""`onnx-device-guard doctor`: does a model run on the device you want, and if not, why.

One module per job: `facts` (the records), `files` (finding model files),
`inputs` (test inputs that fit), `capture` (what onnxruntime says), `probe`
(the live machine, sessions and runs), `diagnosis` (causes, verdict, exit
status), `render` (the text and JSON reports), `terminal` (stdout, stderr,
escapes, colour and progress) and `command` (the doctor's run from options
to exit status). The command line is `onnx_device_guard._cli`. Nothing is
imported here, so that `terminal`, which the command line imports, loads
without torch.
"""
