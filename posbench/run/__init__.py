"""posbench.run"""
