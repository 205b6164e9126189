"""The kernels task's report: the generic tables and charts of its ``METRICS`` (no section of its
own), after the extrapolation section, variants x seq_len, a table per head_dim."""

REPORT_ORDER = 30
REPORT_COLUMN = "seq_len"
