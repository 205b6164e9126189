"""posbench.data"""
