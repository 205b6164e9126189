"""posbench.core"""
