"""Launching compiled kernels: the CUDA driver layer and the conversion of tensor arguments."""
