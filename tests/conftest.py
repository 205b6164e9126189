# Triton decides at import time whether to compile kernels or interpret them with numpy, so the
# variable must be set before any test module imports triton: the ALiBi-Triton tests then run on
# CPU tensors. A machine with a GPU can export TRITON_INTERPRET=0 to test the compiled kernels.
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
