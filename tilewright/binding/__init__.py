"""How a call's arguments are described (torch tensors, NumPy arrays, DLPack and CUDA array
interface objects, scalars) and checked against a kernel's parameters.

One rule for every backend — the GPU launchers, the emulator and the interpreter all bind through
``bind_arguments`` — so a call is accepted or refused, with the same message naming the parameter,
wherever it runs.  A foundation module like ``errors``: it depends only on the IR's parameter
declarations, and every layer that runs kernels may use it.
"""
