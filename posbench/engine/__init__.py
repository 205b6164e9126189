"""posbench.engine"""
