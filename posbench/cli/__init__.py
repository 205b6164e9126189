"""posbench.cli"""
