"""Attention for bias methods: ``BiasMethod`` (bias.py), the plans that attend with its bias
(routes.py: ``choose_route``) and the kernels in plain PyTorch they run; and PaTH's attention
through accumulated Householder transforms by the chunked UT transform (householder.py).

Above ``posbench.core`` (the method contract and the plain masked attention), below the methods.
"""
