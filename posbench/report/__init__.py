"""posbench.report"""
